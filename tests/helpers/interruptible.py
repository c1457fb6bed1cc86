"""A test for tests/test_interrupt.py to interrupt (not collected by `make test`: its name is not
`test_*.py`): it takes the session's redis-server and runs an RQ worker in process, as `drain`
does, says the redis-server's pid in the file the environment names, then waits for Ctrl-C."""

from __future__ import annotations

import os
from pathlib import Path

from redis import Redis

from tests.helpers import drain, wait_for
from tests.helpers.redis_server import RedisServer

MARKER = "COUNTERSIGN_TEST_INTERRUPT_MARKER"  # the file this test writes the redis-server's pid to


def test_waits_for_ctrl_c(redis_server: RedisServer, redis: Redis) -> None:
    assert redis_server.process is not None
    drain(redis, "interruptible")  # an RQ worker in this process, which would take SIGINT for its own
    marker = Path(os.environ[MARKER])
    written = marker.with_suffix(".part")
    written.write_text(str(redis_server.process.pid))
    written.rename(marker)  # whole, or not there at all
    wait_for(lambda: False, timeout=100, what="Ctrl-C")  # what ends it is the interrupt
