"""Files that hold secrets or the database are private to their owner whatever the umask: the SQLite
database and its WAL files, `.run/` and the local `COUNTERSIGN_SECRET` in it; an existing one open to
others is made private, with a warning."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from countersign import stack
from countersign.config import load_settings
from countersign.files import private_dir, private_file, write_private
from countersign.store import Store, create_db_engine, upgrade


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that takes nothing away: files are created as their creator asks."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_sqlite_database_and_its_wal_files_are_private(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "countersign.db"
    engine = create_db_engine(f"sqlite:///{path}")
    upgrade(engine)
    with engine.connect():  # WAL mode: SQLite keeps -wal and -shm beside the file while connected
        assert {p.name: mode(p) for p in tmp_path.iterdir()} == {
            "countersign.db": 0o600,
            "countersign.db-wal": 0o600,
            "countersign.db-shm": 0o600,
        }
    engine.dispose()
    assert Store.from_url(f"sqlite:///{path}").queue_for("U0LEAD", 1) == []  # and it works


def test_an_existing_database_open_to_others_is_made_private_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "countersign.db"
    upgrade(create_db_engine(f"sqlite:///{path}"))
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="countersign.files"):
        create_db_engine(f"sqlite:///{path}").dispose()
    assert mode(path) == 0o600
    assert f"{path} was open to other users (mode 644); made private (mode 600)" in caplog.messages


def test_the_local_secret_and_run_directory_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    secret = stack._local_secret("secret", stack._grant_secret)  # `countersign run`'s COUNTERSIGN_SECRET
    run = tmp_path / ".run"
    assert (mode(run), mode(run / "secret"), len(secret)) == (0o700, 0o600, 64)
    run.chmod(0o755)
    (run / "secret").chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="countersign.files"):
        assert stack._local_secret("secret", stack._grant_secret) == secret  # kept, not replaced
    assert (mode(run), mode(run / "secret")) == (0o700, 0o600)
    assert caplog.messages == [
        ".run was open to other users (mode 755); made private (mode 700)",
        ".run/secret was open to other users (mode 644); made private (mode 600)",
    ]
    webhook = stack._local_secret("webhook-secret", stack._webhook_secret)  # COUNTERSIGN_WEBHOOK_SECRET
    assert mode(run / "webhook-secret") == 0o600
    assert webhook == load_settings(COUNTERSIGN_WEBHOOK_SECRET=webhook).COUNTERSIGN_WEBHOOK_SECRET  # valid


def test_the_helpers_create_private_files_and_refuse_to_overwrite(tmp_path: Path, open_umask: None) -> None:
    folder = private_dir(tmp_path / "a" / "b")
    write_private(folder / "token", "t0ken")
    assert (mode(folder), mode(folder / "token"), (folder / "token").read_text()) == (0o700, 0o600, "t0ken")
    with pytest.raises(FileExistsError):
        write_private(folder / "token", "other")
    assert mode(private_file(folder / "empty")) == 0o600
    assert not private_file(folder / "absent", create=False).exists()
