"""The collector's view of a long-running process's heap.

A countersign process loads its modules and builds its app once, then serves for days. Those objects
never become garbage, yet CPython's full (generation 2) collections scan every one of them, all
threads waiting meanwhile: in a web worker such a pause measured 230 to 295 ms under load
(BENCHMARKS.md, "Issue 14, fifth pass: the click path"), long enough to hold a click's decision that
long. `gc.freeze()` moves every object alive into a permanent generation that collections skip
(https://docs.python.org/3/library/gc.html#gc.freeze).
"""

from __future__ import annotations

import gc


def freeze_loaded() -> int:
    """Collect the garbage of start-up, then freeze what is left (the modules, the app, the
    connection pools) out of the collector's reach. Call once, after the process has built what it
    keeps and before it serves. Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
