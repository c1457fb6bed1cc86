"""Files that hold secrets or the database: private to their owner (0600, directories 0700),
whatever the umask.

The umask only takes bits away from the mode a file is created with, and tools create files 0644
(SQLite, `open`); so a private file is created with `O_EXCL` and its mode set on the open file
before a byte is written, and an existing one that others may read is tightened, with a warning.
A leaf module (it imports nothing of ours), so `store` may use it too.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
_OTHERS = 0o077  # the group's and everyone else's bits


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner may use (0700): created so (with any missing parents,
    as the umask says), or an existing one tightened (see `private_file`). Raises `OSError` when it
    cannot be created or tightened."""
    existed = path.is_dir()
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    if existed:
        _tighten(path)
    else:
        path.chmod(PRIVATE_DIR)
    return path


def write_private(path: Path, text: str) -> None:
    """Create the file `path` holding `text` (UTF-8), readable and writable by its owner only
    (0600) from its first byte. Raises `FileExistsError` if it exists, `OSError` otherwise."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        os.fchmod(fd, PRIVATE_FILE)
        file.write(text)


def private_file(path: Path, create: bool = True) -> Path:
    """`path` as a file only its owner may read or write: created empty and 0600 when missing (and
    `create`), or an existing one that the group or others may use tightened to its owner's bits,
    with a warning naming it and both modes. Raises `OSError` when it cannot be (for example, the
    file belongs to someone else)."""
    if create:
        try:
            write_private(path, "")
            return path
        except FileExistsError:
            pass
    if path.exists():
        _tighten(path)
    return path


def _tighten(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & _OTHERS:
        path.chmod(mode & ~_OTHERS)
        log.warning(
            "%s was open to other users (mode %03o); made private (mode %03o)", path, mode, mode & ~_OTHERS
        )
