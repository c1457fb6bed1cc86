"""What an agent process loads: `countersign.agent` (and `countersign`, which re-exports it) imports
none of the router's heavy libraries, Bolt, Alembic or the CEL engine, since an agent's RQ worker
imports it in every job. Each import runs in a fresh interpreter, so nothing the tests loaded
already counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["slack_bolt", "alembic", "cel"]


def heavy_after_importing(module: str) -> list[str]:
    """Which of `HEAVY` are in `sys.modules` (as packages or their submodules) after a fresh
    interpreter imports `module`."""
    code = (
        f"import json, sys, {module}\n"
        f"print(json.dumps(sorted({{name.split('.')[0] for name in sys.modules}} & set({HEAVY!r}))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True
    )
    return list(json.loads(result.stdout))


@pytest.mark.parametrize("module", ["countersign.agent", "countersign"])
def test_the_agent_api_imports_no_bolt_alembic_or_cel(module: str) -> None:
    assert heavy_after_importing(module) == []


@pytest.mark.parametrize(
    ("module", "heavy"),
    [
        ("countersign.bot.app", "slack_bolt"),
        ("countersign.router.policy", "cel"),
        ("alembic.config", "alembic"),
    ],
)
def test_the_check_sees_each_heavy_library_when_it_is_imported(module: str, heavy: str) -> None:
    assert heavy in heavy_after_importing(module)
