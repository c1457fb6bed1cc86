"""`make install` on a shared machine: the optional Chromium install, when apt-get fails (its lock
held by another apt-get, no root), is tried again by the next `make` rather than remembered as done.

Runs the repository's real Makefile with `VENV` at an installed-looking directory and a `PATH`
whose `apt-get` answers as a busy machine's does, and where `chromium` is not found."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.helpers import REPO

FAKE_APT_GET = """#!/bin/sh
echo "$*" >> "{log}"
if [ -e "{busy}" ]; then
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
  exit 100
fi
"""


def _machine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A venv whose main install is done, and an environment whose apt-get is busy until
    `tmp_path / "busy"` is removed; it notes each call in `tmp_path / "apt.log"`."""
    venv, bin_dir = tmp_path / "venv", tmp_path / "bin"
    venv.mkdir()
    bin_dir.mkdir()
    (venv / ".installed").touch()  # newer than pyproject.toml: the main install is not redone
    apt_get = bin_dir / "apt-get"
    apt_get.write_text(FAKE_APT_GET.format(log=tmp_path / "apt.log", busy=tmp_path / "busy"))
    apt_get.chmod(0o755)
    touch = shutil.which("touch")
    assert touch is not None
    (bin_dir / "touch").symlink_to(touch)
    (tmp_path / "busy").touch()
    return venv, {**os.environ, "PATH": str(bin_dir)}


def _make_install(venv: Path, env: dict[str, str]) -> str:
    make = shutil.which("make")
    assert make is not None
    done = subprocess.run(
        [make, "-C", str(REPO), "install", f"VENV={venv}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout + done.stderr


def test_a_failed_chromium_install_is_tried_again_by_the_next_make(tmp_path: Path) -> None:
    venv, env = _machine(tmp_path)
    log = tmp_path / "apt.log"

    first = _make_install(venv, env)
    assert "chromium could not be installed" in first and "the next make tries again" in first
    assert not (venv / ".chromium").exists()
    assert log.read_text().splitlines() == ["-q -o DPkg::Lock::Timeout=120 update"]

    (tmp_path / "busy").unlink()  # the other apt-get is done
    _make_install(venv, env)
    assert log.read_text().splitlines()[1:] == [
        "-q -o DPkg::Lock::Timeout=120 update",
        "-q -o DPkg::Lock::Timeout=120 install -y chromium chromium-driver",
    ]
    assert (venv / ".chromium").exists()

    _make_install(venv, env)  # installed: not tried again
    assert len(log.read_text().splitlines()) == 3
