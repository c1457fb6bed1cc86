"""A dry run of one request through a policy, for `countersign policy check FILE --request JSON`:
what intake would decide (route, approvers, quorum, approval by policy, what reviewers read and
why), with no Redis, database or Slack. User groups are shown, not resolved."""

from __future__ import annotations

from typing import Any

from ..schema import ApprovalRequestV1, parse
from ..untrusted import json_text
from .gate import facts_of
from .policy import Policy

# The fields of a request the policy never reads; a dry run may leave them out.
PLACEHOLDERS = {
    "summary": "dry run",
    "requester": "dry-run",
    "idempotency_key": "dry-run",
    "resume": {"queue": "dry-run", "func": "dry.run"},
}


def dry_run(policy: Policy, data: Any) -> str:
    """The lines `countersign policy check --request` prints for the request `data` (schema v1, a
    JSON object; `summary`, `requester`, `resume` and the key may be left out).

    Raises `InvalidRequest` when `data` is not a valid request (or would hide a key field of its
    class: `Policy.admit`), `UnknownAction` when the policy
    refuses its action class, `PolicyError` when the class has no usable route. A rule that cannot
    be evaluated is not an error: it is printed, and the request is reviewed (fails closed).
    """
    request = parse(ApprovalRequestV1, {**PLACEHOLDERS, **data} if isinstance(data, dict) else data)
    route = policy.admit(request.action, request.payload)
    gate = policy.gate(request.action, facts_of(request))
    decided = "no, reviewed by a human" if gate.review else "yes, approved by policy with no card"
    payload = json_text(request.payload, indent=None)
    lines = [
        f"{policy.path}: policy version {policy.version}, sha256 {policy.sha256[:12]}…",
        f"request: {request.action} from {request.requester}, payload {payload}",
        f"route: {policy.describe(request.action)}",
        f"approvers: {', '.join(route.approvers.users + route.approvers.usergroups)}",
        f"quorum: {gate.approvals}",
        f"auto-approved: {decided}",
        f"reviewers read: {gate.says}",
        f"rule: {gate.reason}",
        "labels:",
        *_labels(policy, request.action),
        f"evaluation errors: {'; '.join(gate.errors) or 'none'}",
    ]
    return "\n".join(lines)


def _labels(policy: Policy, action: str) -> list[str]:
    rules = policy.rules(action)
    if not rules:
        return ["  (no CEL rules)"]
    return [
        f"  {key}: {json_text(label, indent=None) if label else '(none: plain words)'} for {rule}"
        for key, rule, label in rules
    ]
