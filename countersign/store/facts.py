"""What a request's columns say beyond themselves, shared by its two shapes: the ORM's
`models.ApprovalRequest` and the plain `rows.RequestRow` (the same columns)."""

from __future__ import annotations

from typing import Any, Protocol

from .rules import Rules


class Columns(Protocol):
    """The columns of a request the derived facts read (either shape; see `ApprovalRequest`)."""

    @property
    def approvers(self) -> list[Any]: ...
    @property
    def on_behalf_of(self) -> str | None: ...
    @property
    def rules(self) -> Rules: ...
    @property
    def payload(self) -> dict[str, Any]: ...
    @property
    def approved_payload(self) -> dict[str, Any] | None: ...
    @property
    def execution(self) -> str | None: ...


class RequestFacts:
    """The derived properties of a request, for both of its shapes (a mixin: no state of its own)."""

    __slots__ = ()

    @property
    def eligible_approvers(self: Columns) -> list[str]:
        """The current level's approvers who may approve (see `eligible_approvers`)."""
        return eligible_approvers(self.approvers, self.on_behalf_of, self.rules)

    @property
    def payload_to_run(self: Columns) -> dict[str, Any]:
        """The payload that runs if the decision lets it: the reviewer's edit, else the frozen payload."""
        return self.approved_payload if self.approved_payload is not None else self.payload


def eligible_approvers(approvers: list[str], on_behalf_of: str | None, rules: Rules) -> list[str]:
    """`approvers` (Slack user ids) but the human the agent acts for (`on_behalf_of`), who may not
    approve their own request unless the policy's `rules` set `self_approval: true`."""
    return [user for user in approvers if user != on_behalf_of or rules.self_approval]
