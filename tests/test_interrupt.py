"""Ctrl-C stops `make test`: a terminal sends SIGINT to its whole foreground process group, so a
server the tests start in pytest's group (the session's redis-server, say) would die with it and
pytest carry on with errors. The servers the fixtures and tests start run in sessions of their own;
pytest alone gets the interrupt, ends with status 2 and stops them as it tears the fixtures down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, alive, ctrl_c_reaches_it, wait_for
from tests.helpers.interruptible import MARKER

INTERRUPTED = 2  # pytest's exit status when interrupted (pytest.ExitCode.INTERRUPTED)


def test_ctrl_c_stops_pytest_and_the_redis_server_of_its_own(tmp_path: Path) -> None:
    marker = tmp_path / "redis.pid"
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/helpers/interruptible.py"],
        cwd=REPO,
        env={**os.environ, MARKER: str(marker)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a terminal of its own, whose foreground group Ctrl-C signals
        preexec_fn=ctrl_c_reaches_it,
    )
    try:
        redis_pid = int(wait_for(lambda: marker.exists() and marker.read_text(), timeout=60, what="the test"))
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C: the whole process group
        output, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == INTERRUPTED, output
    assert "KeyboardInterrupt" in output and " error" not in output, output
    assert not alive(redis_pid)  # stopped by the fixture's teardown, not left behind
