"""A sweep's steps failing through a Redis outage on a real redis-server: the loss is logged once with
one traceback, each failing step then once every `REPEAT_SECONDS`, and Redis's return once."""

from __future__ import annotations

import logging

import pytest
from redis import Redis

from countersign.outages import REPEAT_SECONDS, Steps, Throttled
from tests.helpers.redis_server import RedisServer


class Clock:
    """The seconds `Steps` reads, moved by the test: a minute of ticks runs in no time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_minute_of_redis_outage_is_a_handful_of_lines(
    redis: Redis, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock, log = Clock(), logging.getLogger("tests.sweep")
    steps = Steps(log, clock=clock)
    names = ["relay", "cards", "home"]
    ticks = 0
    with caplog.at_level(logging.INFO, logger="tests.sweep"), redis_server.down():
        while clock.now < 2 * REPEAT_SECONDS:  # every step fails every second for a minute
            for name in names:
                steps.run(name, redis.ping)
            steps.run("seal", lambda: None)  # a step without Redis keeps running
            clock.now += 1
            ticks += 1
    during = [record.getMessage() for record in caplog.records]
    assert ticks * len(names) == 180
    assert len(during) == 1 + len(names), during  # the loss, then one line per step at 30 s
    assert during[0].startswith("Redis unreachable (ConnectionError")
    assert not any(record.exc_info for record in caplog.records)  # a lost connection is one line
    assert all("still failing" in line for line in during[1:])

    caplog.clear()
    for name in names:
        steps.run(name, redis.ping)
    assert [record.getMessage() for record in caplog.records] == ["Redis reachable again after 60 s"]


def test_a_step_failing_for_another_reason_keeps_its_traceback_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, log = Clock(), logging.getLogger("tests.sweep")
    steps = Steps(log, clock=clock)

    def broken() -> None:
        raise KeyError("no such column")

    with caplog.at_level(logging.INFO, logger="tests.sweep"):
        for _ in range(40):
            steps.run("seal", broken)
            clock.now += 1
        steps.run("seal", lambda: None)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "sweep step seal failed; retrying",
        "sweep step seal still failing (KeyError: 'no such column')",
        "sweep step seal ran again",
    ]
    assert caplog.records[0].exc_info is not None


def test_a_librarys_retry_line_passes_once_every_repeat_seconds(caplog: pytest.LogCaptureFixture) -> None:
    clock, log = Clock(), logging.getLogger("tests.rq")
    throttled = Throttled("could not connect to Redis instance", clock=clock)
    log.addFilter(throttled)
    try:
        with caplog.at_level(logging.INFO, logger="tests.rq"):
            for _ in range(61):
                log.error("Worker %s: could not connect to Redis instance: %s retrying", "w1", "refused")
                log.info("another line")
                clock.now += 1
    finally:
        log.removeFilter(throttled)
    retries = [r.getMessage() for r in caplog.records if "could not connect" in r.getMessage()]
    assert len(retries) == 3 and len(caplog.records) == 3 + 61
    assert retries[1].endswith("(29 such lines in the last 30 s not shown)")
