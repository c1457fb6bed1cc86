"""The package layout of docs/DESIGN.md ("Packages and what each owns") holds: imports point one way,
no module imports one that imports it back (also through imports inside functions), and no module
is over 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent / "countersign"
MAX_LINES = 500
# Top-level modules every package may use; they import only `store` and each other.
SHARED = {
    "bell",
    "config",
    "connections",
    "decision",
    "defaults",
    "exceptions",
    "files",
    "grant",
    "heartbeat",
    "idempotency",
    "outages",
    "ports",
    "schema",
    "slackhttp",
    "untrusted",
    "validation",
    "workers",
}
# import nothing of ours; even `store` may use them
LEAVES = {"defaults", "exceptions", "files", "heartbeat", "untrusted"}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that `name` imports anywhere in its file (inside functions too)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
            candidates = [f"{stem}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.add(candidate)
    return found


MODULES = _modules()
GRAPH = {name: _imports(name, path, MODULES) for name, path in MODULES.items()}


def _area(module: str) -> str:
    """`store`, `agent`, `router`, `bot`, `api`, `integrations`, `sandbox`, or a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "countersign"


def _cycle_from(start: str) -> list[str] | None:
    """An import path that leads from `start` back to it, if there is one."""
    stack, seen = [(start, [start])], set()
    while stack:
        module, path = stack.pop()
        for imported in GRAPH[module]:
            if imported == start:
                return [*path, start]
            if imported not in seen:
                seen.add(imported)
                stack.append((imported, [*path, imported]))
    return None


def test_the_layout_is_read_from_the_package() -> None:
    assert {"countersign.agent.client", "countersign.router.jobs", "countersign.store.state"} <= set(MODULES)
    assert "countersign.router.jobs" in GRAPH["countersign.agent.client"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_one_that_imports_it_back(module: str) -> None:
    assert _cycle_from(module) is None, " → ".join(_cycle_from(module) or [])


def _edges(source: str) -> set[str]:
    return {imported for module in MODULES if _area(module) == source for imported in GRAPH[module]}


def test_store_imports_nothing_of_ours_but_the_leaf_modules() -> None:
    outside = {m for m in _edges("store") if _area(m) != "store"}
    assert outside <= {f"countersign.{leaf}" for leaf in LEAVES}


def test_the_leaf_modules_import_nothing_of_ours() -> None:
    assert all(not GRAPH[f"countersign.{leaf}"] for leaf in LEAVES)


def test_the_agent_imports_the_store_the_shared_modules_and_the_job_names_only() -> None:
    allowed = {"agent", "store", *SHARED}
    outside = {m for m in _edges("agent") if _area(m) not in allowed}
    assert outside <= {"countersign.router", "countersign.router.jobs"}


def test_shared_modules_import_only_the_store_and_each_other() -> None:
    for name in SHARED:
        assert {_area(m) for m in GRAPH[f"countersign.{name}"]} <= {"store", *SHARED}, name


def test_the_router_never_imports_the_bot_and_jobs_import_nothing_of_the_router() -> None:
    assert not {m for m in _edges("router") if _area(m) in ("bot", "sandbox", "agent")}
    assert not {m for m in GRAPH["countersign.router.jobs"] if _area(m) == "router"}


def test_the_api_imports_agent_router_store_shared_and_only_the_web_entry_imports_it() -> None:
    assert {_area(m) for m in _edges("api")} <= {"api", "agent", "router", "store", *SHARED}
    importers = {m for m in MODULES if _area(m) != "api" and any(_area(i) == "api" for i in GRAPH[m])}
    assert importers == {"countersign.bot.server"}


def test_integrations_import_the_agent_and_shared_modules_and_nothing_of_ours_imports_them() -> None:
    assert {_area(m) for m in _edges("integrations")} <= {"integrations", "agent", *SHARED}
    assert not {
        m for m in MODULES if _area(m) != "integrations" and any(_area(i) == "integrations" for i in GRAPH[m])
    }


def test_nothing_in_production_imports_the_sandbox_and_it_imports_none_of_ours() -> None:
    production = {m for m in MODULES if _area(m) not in ("sandbox", "cli", "stack")}
    assert not {m for m in production if any(_area(i) == "sandbox" for i in GRAPH[m])}
    assert {_area(m) for m in _edges("sandbox")} <= {"sandbox"}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_500_lines(module: str) -> None:
    assert len(MODULES[module].read_text().splitlines()) <= MAX_LINES
