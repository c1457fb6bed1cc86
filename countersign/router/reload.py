"""The policy of a long-running process, reloaded when its file changes, never from a file half
written.

A file being rewritten in place can be read half way, and a prefix of a valid policy is often
valid YAML and a valid policy too, with the action classes (or the keys) after the cut gone. So a
process takes a new version of the file only when

- it has settled: its inode, size, modification and change times are the same before and after it
  is read, and it last changed at least `SETTLE_SECONDS` before (a writer still at work keeps
  changing it; the bytes read are the bytes of that one version, whose SHA-256 is recorded);
- it is a valid policy (`policy.parse_policy`);
- it names every action class of the version in force, or lists the ones it drops under
  `removed_actions` (`policydiff.check_successor`).

Otherwise the version in force stays, and a refused file is logged as one error line (once per
version of the file). A new version that weakens a class (`policydiff.weakenings`) is taken, with
one warning line listing how; so is a changed file that still says the same `version:` (the requests
and decisions under it record the same version for two files, and only their `policy_sha256` tells
them apart), with one warning line asking for a new version. Each process keeps its own version and
logs its own lines, when it next reads the policy after the change. Writing the file atomically (a
temporary file in the same directory, renamed over it) keeps a reader from ever seeing a partial
file: README, "The policy file".

Every process loads the policy when it starts (`at_start`), before it serves anything, so that it
always has a last good version to keep: a process that first read the file after it broke would
have none. A process started by another one from a fresh interpreter (the worker's sweep) is
handed its parent's version (`PolicyHolder.last_good`) rather than reading the file again.

A process that starts has no version in force to compare the file with, so the router worker
records in the database each version it takes (at start and on reloads, `record_reloads`) and, as it
starts, compares the file with the last one recorded and with the highest version a request
recorded (`against_history`): classes dropped, a version going back, a change under the same version
are each one warning line, and the file is taken (see `against_history` for why it warns rather than
refuses). A live reload to a lower version is taken with one warning line too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import ConfigError, PolicyError
from ..store.policies import highest_version_used, last_taken, record_taken
from .policy import Policy, parse_policy
from .policydiff import check_successor, restart_warnings, version_lowered, version_not_bumped

log = logging.getLogger(__name__)

SETTLE_SECONDS = 2.0
Stamp = tuple[int, int, int, int]  # inode, size, mtime and ctime in nanoseconds
Version = tuple[bytes, Stamp]  # a version of the file: its bytes and its stamp when read


def _stamp(path: Path) -> Stamp:
    stat = path.stat()
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class PolicyHolder:
    """The policy a long-running process uses, reloaded when the file changes (or on `reload()`,
    which the worker calls on SIGHUP), under the rules of this module. Thread-safe enough: a
    reload swaps one reference."""

    def __init__(self, path: Path | str, version: Version | None = None) -> None:
        """Load `path` now, or take `version` (another process's `last_good`) as the version in
        force. Raises `PolicyError` (naming the file and the field) when that is not a valid
        policy: a broken file at start is an error, not a fallback."""
        self.path = Path(path)
        if version is None:
            try:
                version = (self.path.read_bytes(), _stamp(self.path))
            except OSError as exc:
                raise PolicyError(f"{self.path}: cannot read ({exc.strerror})") from None
        self._raw, self._stamp = version
        self._policy = parse_policy(self.path, self._raw)
        self._refused: Stamp | None = None
        self._waiting: Stamp | None = None
        self.on_taken: Callable[[Policy], None] | None = None  # told of each version a reload takes

    def current(self) -> Policy:
        """The policy in force, after taking the file if it changed since the last look and may be
        taken now."""
        try:
            stamp = _stamp(self.path)
        except OSError as exc:
            log.error(
                "policy file %s cannot be read (%s); keeping version %s", self.path, exc, self._policy.version
            )
            return self._policy
        if stamp not in (self._stamp, self._refused):
            self._look(stamp)
        return self._policy

    def last_good(self) -> Version:
        """The version in force, to hand to a process started from a fresh interpreter."""
        return self._raw, self._stamp

    def reload(self) -> None:
        """Look at the file now, even at a version refused before; it is taken on the same terms."""
        self._refused = None
        self.current()

    def _look(self, stamp: Stamp) -> None:
        raw = self._settled(stamp)
        if raw is None:
            return
        try:
            policy = parse_policy(self.path, raw)
            weaker = check_successor(self._policy, policy)
        except PolicyError as exc:
            self._refused = stamp
            log.error("POLICY NOT RELOADED, version %s stays in force: %s", self._policy.version, exc)
            return
        if weaker:
            log.warning(
                "POLICY WEAKENED: version %s (sha256 %s) reviews less than version %s: %s",
                policy.version,
                policy.sha256[:12],
                self._policy.version,
                "; ".join(weaker),
            )
        if (unbumped := version_not_bumped(self._policy, policy)) is not None:
            log.warning("%s", unbumped)
        if (lowered := version_lowered(self._policy.version, "in force", policy)) is not None:
            log.warning("%s", lowered)
        self._policy, self._raw, self._stamp, self._refused = policy, raw, stamp, None
        log.warning(
            "policy reloaded from %s: version %s, sha256 %s", self.path, policy.version, policy.sha256[:12]
        )
        if self.on_taken is not None:
            self.on_taken(policy)

    def _settled(self, stamp: Stamp) -> bytes | None:
        """The file's bytes if it has not changed for `SETTLE_SECONDS` nor while it was read, else
        None (said once per version of the file)."""
        if time.time_ns() - stamp[3] >= SETTLE_SECONDS * 1e9:
            try:
                raw = self.path.read_bytes()
                if _stamp(self.path) == stamp:
                    return raw
            except OSError:
                pass  # replaced meanwhile: the next look sees the new file
        if self._waiting != stamp:
            self._waiting = stamp
            log.info("policy file %s changed; taken once unchanged for %s s", self.path, SETTLE_SECONDS)
        return None


_holders: dict[Path, PolicyHolder] = {}


def at_start(path: Path | str, version: Version | None = None) -> PolicyHolder:
    """Load the process's policy as it starts (`holder`, from the file or from `version`), so that it
    has a last good version before the file can break. Raises `ConfigError` naming
    COUNTERSIGN_POLICY, the file and the field when it is not a valid policy."""
    try:
        return holder(path, version)
    except PolicyError as exc:
        raise ConfigError(f"COUNTERSIGN_POLICY: {exc}") from None


def holder(path: Path | str, version: Version | None = None) -> PolicyHolder:
    """The process's `PolicyHolder` for `path`: the one already loaded (by `at_start`, or an earlier
    call), else one loaded now, from the file or from `version` (another process's `last_good`).

    One per process and file, shared by every `Runtime` of the process (the router worker's jobs
    and the worker itself), so a refused file is reported once and the last good policy stays in
    force for every job, not only for the one that first saw the file change. Raises `PolicyError`
    when the version to load is not a valid policy.
    """
    key = Path(path).resolve()
    if key not in _holders:
        _holders[key] = PolicyHolder(key, version)
    return _holders[key]


def against_history(holder: PolicyHolder, engine: Engine) -> None:
    """At the router's start: compare the version `holder` loaded with what the database `engine`
    knows (`store.policies`: the version the router took last, the highest a request recorded),
    log one `WARNING` line per finding (`policydiff.restart_warnings`: action classes dropped, a
    version going back, a change under the same version), record it as taken, and record each
    version a later reload takes (`PolicyHolder.on_taken`).

    It warns and does not refuse: a starting process has no other version to keep (a live reload
    keeps the one in force), an operator who restarts on an older file may mean the rollback, and a
    router that refused to start would route nothing. Nothing to compare on a new database. Raises
    `SQLAlchemyError` when the database fails at start.
    """
    policy = holder.current()
    for line in restart_warnings(last_taken(engine), highest_version_used(engine), policy):
        log.warning("%s", line)
    record_taken(engine, policy.version, policy.sha256, policy.file.actions)
    record_reloads(holder, engine)


def record_reloads(holder: PolicyHolder, engine: Engine) -> None:
    """Record in the database `engine` each version a later reload of `holder` takes (the router
    worker's and its sweep's, each of which reloads on its own)."""
    holder.on_taken = lambda taken: _record(engine, taken)


def _record(engine: Engine, policy: Policy) -> None:
    """Record `policy` as taken by a reload; a database failure is logged, and the reload stands."""
    try:
        record_taken(engine, policy.version, policy.sha256, policy.file.actions)
    except SQLAlchemyError as exc:
        log.error("policy version %s not recorded as taken (%s)", policy.version, exc)
