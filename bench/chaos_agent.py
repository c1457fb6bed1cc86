"""The chaos test's agent: each action it is allowed to run appends its key to a file (fsync'd),
so the checker can count effects, whatever was killed when."""

from __future__ import annotations

import os
from typing import Any

from countersign import approved_action


@approved_action
def execute(payload: dict[str, Any]) -> str:
    """Resume job: record one effect for `payload["key"]`."""
    with open(os.environ["CHAOS_EFFECTS"], "a", encoding="utf-8") as effects:
        effects.write(payload["key"] + "\n")
        effects.flush()
        os.fsync(effects.fileno())
    return "done"
