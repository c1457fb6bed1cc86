"""The connections a router process uses (web, worker, sweep), built once from `Settings`.

`Runtime` adds to the database and Redis (`countersign.connections`) the Slack Web API client,
the policy, and the resume event a decision writes to the outbox. RQ jobs find it through
`current()`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, ServerErrorRetryHandler

from ..config import Settings, load_settings
from ..connections import Connections
from ..decision import decision_of
from ..defaults import SLACK_TIMEOUT_SECONDS
from ..exceptions import ConfigError, ServiceUnavailable
from ..slackhttp import PooledWebClient
from ..store import Request, ResumeEvent
from .jobs import resume_job_id
from .pace import HeldOff

if TYPE_CHECKING:  # the policy (and its CEL engine) is imported when first needed
    from .policy import Policy
    from .reload import PolicyHolder

_SILENT = logging.getLogger(f"{__name__}.slack_at_start")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False

# What Slack answers for a token it will not take (https://docs.slack.dev/reference/methods/auth.test,
# "Errors"); any other answer, or none, is about where Slack is.
_TOKEN_ERRORS = frozenset(
    {
        "not_authed",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
        "missing_scope",
        "no_permission",
    }
)


@dataclass
class Runtime(Connections):
    """Lazily built clients for one router process. Each property raises `ConfigError` if its
    setting is missing."""

    @cached_property
    def slack(self) -> WebClient:
        """Web API client (`SLACK_BOT_TOKEN`, `SLACK_API_URL`); retries connection errors and 5xx once.
        Its calls reuse kept-alive connections (`PooledWebClient`), from any thread."""
        self.settings.require("SLACK_BOT_TOKEN", needed_by="the Slack Web API client")
        return PooledWebClient(
            token=self.settings.SLACK_BOT_TOKEN,
            base_url=self.settings.slack_api_url,
            timeout=SLACK_TIMEOUT_SECONDS,
            retry_handlers=[ConnectionErrorRetryHandler(), ServerErrorRetryHandler()],
        )

    @cached_property
    def held_off(self) -> HeldOff:
        """The Web API methods Slack rate-limited, held off until their `Retry-After` (`pace.HeldOff`)."""
        return HeldOff()

    def check_slack(self) -> None:
        """A start-up check: Slack takes the bot token (auth.test). Raises `ConfigError` or
        `ServiceUnavailable` as `slack_at_start` does."""
        with slack_at_start(self.settings) as slack:
            slack.auth_test()

    @cached_property
    def policies(self) -> PolicyHolder:
        """The policy file (`COUNTERSIGN_POLICY`), reloaded on change; raises `PolicyError` if it
        is invalid at first load."""
        self.settings.require("COUNTERSIGN_POLICY", needed_by="routing by policy")
        assert self.settings.COUNTERSIGN_POLICY is not None
        from .reload import holder

        return holder(self.settings.COUNTERSIGN_POLICY)

    @property
    def policy(self) -> Policy:
        """The policy in force now (see `PolicyHolder.current`)."""
        return self.policies.current()

    def resume_event(self, request: Request) -> ResumeEvent:
        """The outbox row of a request the store has just decided (`Store.decide`, `vote`,
        `expire`): its resume job id and its decision, the grant signed with `COUNTERSIGN_SECRET`."""
        decision = decision_of(request, self.settings.COUNTERSIGN_SECRET or "")
        return ResumeEvent(resume_job_id(request.id), decision.to_json())


@contextlib.contextmanager
def slack_at_start(settings: Settings, token: str = "SLACK_BOT_TOKEN") -> Iterator[WebClient]:
    """A Web API client for the Slack calls a command makes before it serves (`SLACK_BOT_TOKEN`,
    `SLACK_API_URL`; one try each, and nothing logged: the failure is the command's one line). Slack
    refusing the token raises `ConfigError` naming `token` (the setting that holds it), no answer or an
    unexpected one (a network error, a timeout, a 5xx, a page that is not Slack's) raises
    `ServiceUnavailable` naming `SLACK_API_URL`; each says what to do."""
    client = WebClient(
        token=settings.SLACK_BOT_TOKEN,
        base_url=settings.slack_api_url,
        timeout=SLACK_TIMEOUT_SECONDS,
        logger=_SILENT,
    )
    try:
        yield client
    except SlackApiError as exc:
        error = " ".join(str(exc.response.get("error") or exc.response.status_code).split())  # one line
        if error in _TOKEN_ERRORS:
            raise ConfigError(
                f"{token}: Slack refused the token ({error}); set it to a valid token of the installed app"
            ) from None
        raise _unreachable(settings, f"it answered {error[:80]}") from None
    except (SlackClientError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise _unreachable(settings, str(reason) or type(exc).__name__) from None


def _unreachable(settings: Settings, why: str) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"SLACK_API_URL: no usable answer from Slack's Web API at {settings.slack_api_url} ({why}); "
        "check the network, and SLACK_API_URL if it is set"
    )


@functools.cache
def current() -> Runtime:
    """This process's `Runtime`, from the environment. Tests call `current.cache_clear()`."""
    return Runtime(load_settings())
