"""What a new version of the policy changes for the worse: the classes it loses without saying so,
and the ways it weakens a class. Read by `reload.PolicyHolder` before it takes a new file, and by
`countersign policy check OLD NEW`.

A weakening is a change that lets something through with less review than before: fewer approvals
(a lower `require` quorum), more approvers, an added or changed `auto_approve`, a changed or
removed `review_when`, `always_review` or `self_approval` turned the other way, a timeout that now
`allow`s, escalation levels removed, a longer `grant_ttl`, fields newly `editable`, key fields no
longer shown first, a reject reason no longer required, or unknown action classes now routed. A
CEL rule cannot be compared for what it allows, so any change of one is reported. So is a user or
user group added to `admins`: it lets them see every reviewer's numbers on the Home tab.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..exceptions import PolicyError
from ..store import Rules
from ..store.policies import Taken
from .policy import Policy

DEFAULTS = "defaults"  # the classes a file does not name, when it routes them (`unknown_actions: route`)


def check_successor(old: Policy, new: Policy) -> list[str]:
    """The weakenings from `old` to `new` (`weakenings`). Raises `PolicyError` when `new` does not
    name an action class of `old` and does not list it under `removed_actions` (a file cut short
    loses the classes after the cut)."""
    if missing := dropped(old.file.actions, new):
        raise PolicyError(
            f"{new.path}: version {new.version} does not name the action classes {', '.join(missing)} of "
            f"version {old.version} (a file cut short?); list them under removed_actions to remove them"
        )
    return weakenings(old, new)


def dropped(actions: Iterable[str], new: Policy) -> list[str]:
    """The action classes of `actions` (an earlier version's) that `new` neither names nor lists
    under `removed_actions`, sorted: what a file cut short loses."""
    return sorted(set(actions) - set(new.file.actions) - set(new.file.removed_actions))


def version_lowered(highest: int, where: str, new: Policy) -> str | None:
    """The warning line when `new` says a lower `version` than `highest` (the version in force, or
    the highest `where` names, e.g. "already recorded on requests"): requests and decisions record
    the version, and it no longer tells which policy came later. None when it does not go back.
    Logged by `reload.PolicyHolder` on a reload and by `reload.against_history` at start."""
    if new.version >= highest:
        return None
    return (
        f"POLICY VERSION GOES BACK: {new.path} says version {new.version}, below version {highest} {where}; "
        f"requests and decisions under it record version {new.version}, so the version no longer tells "
        f"which policy came later: give it a version above {highest} (a rollback is a new version too)"
    )


def restart_warnings(last: Taken | None, used: int | None, new: Policy) -> list[str]:
    """The warning lines for `new`, the file a router starts on, against `last` (the version the
    router took last, `store.policies.last_taken`; None on a new database) and `used` (the highest
    version a request recorded, or None): the action classes of `last` it drops without listing
    them under `removed_actions` (which a live reload would have refused), its version going back,
    or a changed file keeping `last`'s version. Empty for the file in force before, or a first run."""
    lines = []
    if last is not None and last.sha256 != new.sha256:
        if lost := dropped(last.actions, new):
            lines.append(
                f"POLICY DROPS ACTION CLASSES AT START: {new.path} (version {new.version}, sha256 "
                f"{new.sha256[:12]}) does not name {', '.join(lost)} of version {last.version} (sha256 "
                f"{last.sha256[:12]}), the version in force before (since {last.taken_at:%Y-%m-%d %H:%M} "
                "UTC); a live reload refuses such a file (a file cut short?). Taken, as no other version is "
                "in force: restore them, or list them under removed_actions to remove them"
            )
        if last.version == new.version:
            lines.append(_unbumped(last.sha256, new))
    highest = [(last.version, "in force before")] if last is not None else []
    highest += [(used, "already recorded on requests")] if used is not None else []
    if highest and (lowered := version_lowered(*max(highest), new)):
        lines.append(lowered)
    return lines


def successor(old: Policy, new: Policy) -> str:
    """One line for `countersign policy check OLD NEW`: whether `new` may replace `old`, and how it
    weakens it. Raises `PolicyError` as `check_successor` does."""
    weaker = check_successor(old, new)
    verdict = f"weakens it: {'; '.join(weaker)}" if weaker else "weakens nothing"
    return f"{new.path} (version {new.version}) may replace {old.path} (version {old.version}); it {verdict}"


def version_not_bumped(old: Policy, new: Policy) -> str | None:
    """The warning line when `new` differs from `old` (another SHA-256) but says the same `version`:
    requests and decisions would record both as one version, told apart only by `policy_sha256`.
    None when the version changed or the bytes did not. Logged by `reload.PolicyHolder` on a reload,
    printed by `countersign policy check OLD NEW`."""
    if new.version != old.version or new.sha256 == old.sha256:
        return None
    return _unbumped(old.sha256, new)


def _unbumped(old_sha256: str, new: Policy) -> str:
    return (
        f"POLICY VERSION NOT BUMPED: {new.path} changed (sha256 {old_sha256[:12]} → {new.sha256[:12]}) "
        f"but still says version {new.version}; requests and decisions record both files as version "
        f"{new.version}, told apart only by their policy_sha256: give each change its own version"
    )


def weakenings(old: Policy, new: Policy) -> list[str]:
    """One line per weakening from `old` to `new`, e.g. `issue_refund: quorum 2 → 1`; empty when
    `new` asks for at least as much review everywhere."""
    lines = []
    for action in sorted({*new.file.actions, DEFAULTS}):
        before = _compared_to(old, action)
        if before is not None and _routes(new, action):
            lines += [f"{action}: {change}" for change in _changes(old, before, new, action)]
    routed = [a for a in old.file.actions if a not in new.file.actions and _routes(new, DEFAULTS)]
    lines += [f"{action}: removed, now routed by defaults" for action in sorted(routed)]
    if old.file.unknown_actions == "refuse" and new.file.unknown_actions == "route":
        lines.append("unknown action classes: refused → routed by defaults")
    lines += [f"admins added: {', '.join(added)}"] if (added := _admins_added(old, new)) else []
    return lines


def _admins_added(old: Policy, new: Policy) -> list[str]:
    """The users and user groups `new`'s `admins` names that `old`'s did not, sorted."""
    was, now = old.file.admins, new.file.admins
    before = set(was.users + was.usergroups) if was is not None else set()
    return sorted(set(now.users + now.usergroups) - before) if now is not None else []


def _routes(policy: Policy, action: str) -> bool:
    """Whether `policy` sends requests of `action` (or `defaults`) to review at all."""
    return action != DEFAULTS or policy.file.unknown_actions == "route"


def _compared_to(old: Policy, action: str) -> str | None:
    """What `old` did with `action`: its own rules, the defaults when it routed unknown classes by
    them, or None when it refused it (nothing to weaken)."""
    if action in old.file.actions:
        return action
    return DEFAULTS if _routes(old, DEFAULTS) else None


def _changes(old: Policy, before: str, new: Policy, action: str) -> Iterator[str]:
    was, now = old.snapshot(before), new.snapshot(action)
    yield from _gate_changes(lambda key: old.setting(before, key), lambda key: new.setting(action, key))
    yield from _level_changes(was, now)
    if now.self_approval and not was.self_approval:
        yield "self_approval false → true"
    if now.grant_ttl_seconds > was.grant_ttl_seconds:
        yield f"grant_ttl {was.grant_ttl_seconds} s → {now.grant_ttl_seconds} s"
    if set(was.key_fields) - set(now.key_fields):
        yield f"key_fields {_show(was.key_fields)} → {_show(now.key_fields)}"
    if {k: v for k, v in now.editable.items() if was.editable.get(k) != v}:
        yield f"editable {_show(sorted(was.editable))} → {_show(sorted(now.editable))} (or their limits)"
    if was.reject_reason == "required" and now.reject_reason != "required":
        yield "reject_reason required → optional"


def _gate_changes(was: Callable[[str], Any], now: Callable[[str], Any]) -> Iterator[str]:
    """Changes of the rules that decide whether a human reviews, and how many must approve."""
    before, after = _rule(was("auto_approve")), _rule(now("auto_approve"))
    if after != "none" and after != before:  # added or changed: it may approve more
        yield f"auto_approve {before} → {after}"
    before, after = _rule(was("review_when")), _rule(now("review_when"))
    if before != "none" and after != before:  # removed or changed: it may review less
        yield f"review_when {before} → {after}"
    if was("always_review") and not now("always_review"):
        yield "always_review true → false"
    quorum = [max((r.approvals for r in f("require") or []), default=1) for f in (was, now)]
    if quorum[1] < quorum[0]:
        yield f"quorum {quorum[0]} → {quorum[1]}"
    elif _requires(was("require")) != _requires(now("require")):
        yield f"require {_requires(was('require'))} → {_requires(now('require'))}"


def _level_changes(was: Rules, now: Rules) -> Iterator[str]:
    """Changes of the escalation chain: approvers added, a timeout that now allows, levels removed."""
    for number, (before, after) in enumerate(zip(was.levels, now.levels, strict=False)):
        at = "" if number == 0 else f"escalate[{number - 1}] "
        added = sorted(set(after.users + after.usergroups) - set(before.users + before.usergroups))
        if added:
            yield f"{at}approvers added: {', '.join(added)}"
        if after.on_timeout == "allow" and before.on_timeout != "allow":
            yield f"{at}on_timeout {before.on_timeout} → allow"
    if len(now.levels) < len(was.levels):
        lost = " → ".join(level.channel for level in was.levels[len(now.levels) :])
        yield f"escalation levels {len(was.levels)} → {len(now.levels)} (no longer: {lost})"


def _rule(rule: Any) -> str:
    return "none" if rule is None else repr(rule.rule)


def _requires(requires: Any) -> str:
    return _show([f"{r.approvals} when {r.when}" for r in requires or []])


def _show(names: list[str]) -> str:
    return "[" + ", ".join(names) + "]"
