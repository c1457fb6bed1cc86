"""The policy file: which channel an action class goes to and who may approve it.

This version reads `version`, `defaults` and `actions.<class>` with `channel` and
`approvers.users` (DESIGN.md, "Policy file"). Any other key is refused at load rather than
ignored, so a policy that asks for a rule this version does not enforce fails loudly instead of
silently approving less carefully than it says.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .schema import SLACK_USER_ID, one_line

SLACK_CONVERSATION_ID = r"^[CGDU][A-Z0-9]{2,31}$"


class PolicyError(ValueError):
    """The policy file cannot be used; `str(err)` names the file, and the action class and field."""


class Approvers(BaseModel):
    """Who may decide: Slack user ids (user groups arrive with the policy engine)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: list[Annotated[str, Field(pattern=SLACK_USER_ID)]] = []
    usergroups: Annotated[list[str], Field(max_length=0)] = []


class ActionPolicy(BaseModel):
    """Rules for one action class; unset fields fall back to `defaults`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: Annotated[str, Field(pattern=SLACK_CONVERSATION_ID)] | None = None
    approvers: Approvers | None = None


class PolicyFile(BaseModel):
    """The whole file as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    defaults: ActionPolicy = ActionPolicy()
    actions: dict[Annotated[str, Field(pattern=r"^[a-z0-9_.-]{1,64}$")], ActionPolicy] = {}


@dataclass(frozen=True)
class Route:
    """Where one request goes: a channel (or user id, for a DM) and the approvers' user ids."""

    channel: str
    approvers: tuple[str, ...]


@dataclass(frozen=True)
class Policy:
    """A loaded policy: the validated file, its `version` and the SHA-256 of its bytes."""

    file: PolicyFile
    path: Path
    sha256: str

    @property
    def version(self) -> int:
        """The `version` the file declares."""
        return self.file.version

    def route(self, action: str) -> Route:
        """Channel and approvers for `action`, from `actions.<action>` over `defaults`.

        Raises `PolicyError` when either is configured nowhere: such a request could be seen by
        no one or approved by no one.
        """
        rules = self.file.actions.get(action, ActionPolicy())
        channel = rules.channel or self.file.defaults.channel
        approvers = rules.approvers or self.file.defaults.approvers
        if channel is None:
            raise PolicyError(f"{self.path}: no channel for action class {action!r} (set defaults.channel)")
        if approvers is None or not approvers.users:
            raise PolicyError(f"{self.path}: no approvers for action class {action!r}")
        return Route(channel=channel, approvers=tuple(approvers.users))


def load_policy(path: Path | str) -> Policy:
    """Read and validate a policy file. Raises `PolicyError` naming the file and the field."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = yaml.safe_load(raw)
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    try:
        file = PolicyFile.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(f"{path}: {one_line(exc)}") from None
    return Policy(file=file, path=path, sha256=hashlib.sha256(raw).hexdigest())
