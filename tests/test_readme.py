"""The README's copies of real things agree with them: its copy of `examples/policy.yml` (the same
policy, comments aside) and what `countersign policy check examples/policy.yml` prints (exactly, the
SHA-256 prefix included), so neither can drift from the file `make run` uses."""

from __future__ import annotations

import re
import subprocess
import sys

import yaml

from tests.helpers import REPO

README = (REPO / "README.md").read_text()
EXAMPLE_POLICY = REPO / "examples/policy.yml"
CHECK = "$ .venv/bin/countersign policy check examples/policy.yml\n"


def _block_after(marker: str, fence: str) -> str:
    """The text of the first fenced block (```fence) after `marker` in the README."""
    start = README.index(marker)
    found = re.compile(rf"```{fence}\n(.*?)```", re.S).search(README, start)
    assert found is not None, f"no ```{fence} block after {marker!r}"
    return found.group(1)


def test_the_readmes_policy_is_examples_policy_yml() -> None:
    copy = _block_after("This is `examples/policy.yml`, which `make run` uses:", "yaml")
    assert yaml.safe_load(copy) == yaml.safe_load(EXAMPLE_POLICY.read_text())


def test_the_readmes_policy_check_output_is_what_it_prints() -> None:
    block = _block_after("The policy file", "sh")
    assert block.startswith(CHECK), block
    printed = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "policy", "check", "examples/policy.yml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert block.removeprefix(CHECK) == printed
