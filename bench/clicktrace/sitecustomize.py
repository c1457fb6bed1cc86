"""Stage timings of each click in `countersign web`, for `bench/decision_latency.py --stages DIR` only.

Python imports this module at start-up when `bench/clicktrace` is on `PYTHONPATH` (the bench puts it
there for its web and worker processes when asked; nothing in countersign imports it). With
`COUNTERSIGN_BENCH_CLICKTRACE=DIR` it wraps, by attribute, the steps of a click's work on the
decision pool (`journal.act`: the journal entry, `Store.vote`'s transaction with each psycopg
statement and the COMMIT, `relay.try_publish`, `delivery.update_card`, the journal entry dropped)
and appends one JSON line per click to `DIR/trace-<pid>.jsonl`: `{"request_id", "start", "end",
"steps": [[name, start, end], ...]}`, wall clock (`time.time()`) so the bench can line it up with the
click's send time and the resume job's `enqueued_at`.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from typing import Any

DIR = os.environ.get("COUNTERSIGN_BENCH_CLICKTRACE")
_local = threading.local()
_files: dict[int, Any] = {}
_lock = threading.Lock()


def _step(name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        steps = getattr(_local, "steps", None)
        if steps is None:
            return fn(*args, **kwargs)
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            steps.append((name, start, time.time()))

    return timed


def _write(line: dict[str, Any]) -> None:
    pid = os.getpid()
    with _lock:
        if pid not in _files:
            _files[pid] = open(os.path.join(DIR or ".", f"trace-{pid}.jsonl"), "a", buffering=1)  # noqa: SIM115
        _files[pid].write(json.dumps(line) + "\n")


def _install() -> None:
    import psycopg

    from countersign.router import delivery, journal, relay
    from countersign.store import Store

    act = journal.act

    @functools.wraps(act)
    def traced_act(runtime: Any, client: Any, action: Any) -> Any:
        _local.steps = []
        start = time.time()
        try:
            return act(runtime, client, action)
        finally:
            steps, _local.steps = _local.steps, None
            _write({"request_id": action.request_id, "start": start, "end": time.time(), "steps": steps})

    journal.act = traced_act
    journal.record = _step("journal entry", journal.record)
    journal.forget = _step("journal dropped", journal.forget)
    Store.vote = _step("vote transaction", Store.vote)
    relay.try_publish = _step("enqueue + bell", relay.try_publish)
    delivery.update_card = _step("card rewrite", delivery.update_card)
    psycopg.Connection.commit = _step("COMMIT", psycopg.Connection.commit)
    psycopg.Cursor.execute = _step("statement", psycopg.Cursor.execute)


if DIR:
    _install()
