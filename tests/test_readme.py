"""The README's copies of real things agree with them: its copy of `examples/policy.yml` (the same
policy, comments aside) and what `countersign policy check examples/policy.yml` prints, with and
without `--request` (exactly, the SHA-256 prefix included, and how it exits), so neither can drift
from the file `make run` uses."""

from __future__ import annotations

import re
import shlex
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


def _transcript(block: str) -> list[tuple[list[str], str]]:
    """`[(argv after .venv/bin/countersign, what it prints)]` for each `$ ` command of a README block."""
    runs = re.findall(r"^\$ \.venv/bin/countersign (.*)\n((?:(?!\$ ).*\n)*)", block, re.M)
    return [(shlex.split(command), printed) for command, printed in runs]


def test_the_readmes_dry_runs_print_and_exit_as_it_says() -> None:
    """Trial finding: the README showed a dry run of a payload `editable.amount` refuses in one line
    as bad input (now one without `amount`). Its prose says how each exits ("(exit N)", in this order)."""
    start = README.index("`--request JSON` dry-runs one request")
    prose = README[start : README.index("```sh", start)]
    codes = [int(code) for code in re.findall(r"\(exit (\d)\)", prose)]
    assert codes == [0, 2]  # 2 for bad input: the exit convention README tabulates
    runs = _transcript(_block_after("`--request JSON` dry-runs one request", "sh"))
    assert [argv[-1] for argv, _ in runs] == [
        '{"action": "issue_refund", "payload": {"amount": "25000.00", "currency": "USD"}}',
        '{"action": "issue_refund", "payload": {"currency": "USD"}}',
    ]
    for (argv, printed), code in zip(runs, codes, strict=True):
        done = subprocess.run(
            [sys.executable, "-m", "countersign.cli", *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stdout + done.stderr) == (code, printed)
