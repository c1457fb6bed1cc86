"""``Sandbox``: the workspace plus what people do in it and the Web API faults injected for the bot.

People press buttons on cards and submit or close modals the way Slack's client does; each of those
reaches the bot as a signed interactivity payload (``interactivity``), and the bot's answer to a
view_submission is applied to the modal. Faults queued by ``inject`` are played by ``webapi.dispatch``.
"""

from __future__ import annotations

import copy
import json
import secrets
import time
import urllib.parse

from countersign.sandbox import modals
from countersign.sandbox.blocks import find_button
from countersign.sandbox.identity import RESPONSE_URL_PATH, TEAM_DOMAIN, UNSERVED_BASE_URL
from countersign.sandbox.interactivity import (
    FORM,
    app_home_opened_body,
    block_actions_payload,
    encode_payload,
    home_block_actions_payload,
    signed_post,
    slash_command_fields,
    view_closed_payload,
    view_submission_payload,
)
from countersign.sandbox.modals import SubmissionRefused, ViewError
from countersign.sandbox.shapes import slack_message
from countersign.sandbox.state import ResponseUrl
from countersign.sandbox.types import Fault, Json
from countersign.sandbox.webapi.methods import METHODS
from countersign.sandbox.webapi.response_urls import respond
from countersign.sandbox.workspace import Workspace


class Sandbox(Workspace):
    """A local stand-in for one Slack workspace with one bot (``U0BOT`` / ``B0BOT``) and a user directory.

    ``Sandbox(signing_secret, interactivity_url=None, team_id="T0SANDBOX", users=None, *, clock=time.time,
    post_rate_per_channel=None, post_burst=POST_MESSAGE_BURST)``: the settings, the stored data and the
    methods that return copies of it are the ``Workspace``'s (see there). This class adds what people do
    (``click``, ``submit_view``, ``close_view`` and the payload builders behind them), ``send_signed`` for
    hand-made deliveries, and ``inject`` for Web API faults.
    """

    def inject(
        self,
        method: str,
        *,
        error: str | None = None,
        status: int = 200,
        retry_after: int | None = None,
        delay_seconds: float = 0.0,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of Web API ``method`` (e.g. ``"chat.postMessage"``) misbehave.

        - ``status=429``: HTTP 429, header ``Retry-After: <retry_after or 1>`` (seconds), body
          ``{"ok": false, "error": error or "ratelimited"}``, as Slack rate-limits
          (https://docs.slack.dev/apis/web-api/rate-limits).
        - another ``status`` (e.g. 500, 503): that HTTP status with ``{"ok": false, "error": error or
          "internal_error"}`` (and ``Retry-After`` when ``retry_after`` is given).
        - ``error`` with status 200: ``{"ok": false, "error": error}``, as Slack reports most failures.
        - ``delay_seconds``: sleep that many seconds before answering (to trip client timeouts). Without an
          error or status the call then runs normally, so it takes effect even if the client gave up.

        Faults queue per method in the order injected; a call answered by a fault does not run.
        Raises ValueError for an unknown method or a fault that changes nothing.
        """
        if method not in METHODS:
            raise ValueError(f"unknown Web API method {method!r}")
        if times < 1 or delay_seconds < 0 or not 200 <= status <= 599:
            raise ValueError("times must be >= 1, delay_seconds >= 0 and status an HTTP status >= 200")
        if error is None and status == 200 and not delay_seconds:
            raise ValueError("give an error, a non-200 status or a delay")
        fault: Fault = {
            "error": error,
            "status": status,
            "retry_after": retry_after,
            "delay_seconds": delay_seconds,
            "times": times,
        }
        with self.state.lock:
            self.state.faults.setdefault(method, []).append(fault)

    # --- message buttons ---------------------------------------------------------------------------------

    def click(self, channel: str, ts: str, action_id: str, user_id: str) -> tuple[int, str]:
        """Press a button on a card as ``user_id``: send the signed ``block_actions`` payload to the bot.

        Returns the bot's ``(HTTP status, body text)``, 4xx/5xx included. Raises as ``click_payload``
        does, RuntimeError when ``interactivity_url`` is unset, and OSError when the bot is unreachable
        or slower than ``CLICK_TIMEOUT_SECONDS`` (see ``interactivity``).
        """
        return self.send_signed(self.click_payload(channel, ts, action_id, user_id))

    def click_payload(self, channel: str, ts: str, action_id: str, user_id: str) -> Json:
        """The ``block_actions`` payload Slack would send when ``user_id`` presses ``action_id`` now.

        Looks the button up in the message's current blocks; raises LookupError for an unknown message
        or button. Sending the same payload twice with ``send_signed`` is a double click on a card that
        has not refreshed yet. The payload's ``trigger_id`` is recorded (issued now, for ``user_id``), so the
        bot can open a modal with it within ``trigger_ttl_seconds`` seconds.

        Its ``team`` is this workspace, the one the app is installed in, even when the user belongs to a
        partner workspace (``user_teams``); ``user.team_id`` is the user's own workspace. That is how Slack
        sends a click in a Slack Connect channel: the example payload in
        https://github.com/slackapi/java-slack-sdk/issues/1041 and the report in
        https://github.com/slackapi/bolt-js/issues/1614 (actions, unlike modal submits, carry the
        installing workspace).
        """
        with self.state.lock:
            record = self.state.messages.get((channel, ts))
            if record is None:
                raise LookupError(f"no message with ts {ts!r} in channel {channel!r}")
            block, button = find_button(record["blocks"], action_id)
            key = secrets.token_urlsafe(16)
            self.state.response_urls[key] = ResponseUrl(channel, ts, user_id, self.clock())
            return block_actions_payload(
                team=self._team(self.team_id),
                user=self._actor(user_id),
                message=slack_message(record, self.team_id),
                channel_id=channel,
                block_id=block["block_id"],
                button=button,
                response_url=f"{self.base_url or UNSERVED_BASE_URL}{RESPONSE_URL_PATH}{key}",
                trigger_id=self.state.views.issue_trigger(user_id, self.clock()),
            )

    # --- modals ------------------------------------------------------------------------------------------

    def submit_payload(self, view_id: str, user_id: str, values: dict[str, str | None]) -> Json:
        """The ``view_submission`` payload Slack would send if ``user_id`` submitted ``view_id`` now.

        ``values`` maps input ``block_id`` -> the text typed (None, ``""`` or absent = left empty). The
        payload (https://docs.slack.dev/reference/interaction-payloads/view-interactions-payload) carries
        ``type``, ``team``, ``user {id, username, name, team_id}``, ``api_app_id``, ``token``, a new recorded
        ``trigger_id`` and ``view``: the current view with ``state.values`` = ``{block_id: {action_id:
        {"type": element type, "value": str | None}}}``. Builds only: nothing is sent, stored or checked
        the way Slack's client would (see ``submit_view``). Raises LookupError when the view is not the
        one open on the user's screen and ValueError for block ids that are not inputs of the view.

        ``team`` and ``user.team_id`` are the submitter's own workspace (``team_of``), while
        ``view.app_installed_team_id`` stays this one, where the app that opened the view is installed. For
        a partner user in a Slack Connect channel the two differ, as Slack sends them
        (https://github.com/slackapi/bolt-js/issues/1614, confirmed there by Slack support; Bolt for Python
        reads the installation from ``view.app_installed_team_id`` first since
        https://github.com/slackapi/bolt-python/pull/734). ``close_view``'s ``view_closed`` does the same.
        """
        with self.state.lock:
            record = self.state.views.top_view(view_id, user_id)
            view = copy.deepcopy(record["view"])
            view["state"] = {"values": modals.state_values(view, values)}
            return view_submission_payload(
                team=self._team(self.team_of(user_id)),
                user=self._actor(user_id),
                view=view,
                trigger_id=self.state.views.issue_trigger(user_id, self.clock(), view_id=view_id),
            )

    def submit_view(self, view_id: str, user_id: str, values: dict[str, str | None]) -> tuple[int, str]:
        """Submit the modal ``view_id`` as ``user_id`` with ``values`` (see ``submit_payload``) as Slack does.

        First Slack's client checks apply (``modals.client_errors``: required inputs, lengths, number
        ranges): if any fails, the errors are stored on the view, nothing is sent, and SubmissionRefused
        (a ValueError) is raised. Otherwise the signed ``view_submission`` goes to ``interactivity_url``
        and the bot's answer is applied (https://docs.slack.dev/surfaces/modals):

        - empty body or a JSON object without ``response_action``: close this view (and any above it);
        - ``{"response_action": "errors", "errors": {block_id: message}}``: keep it open with those errors;
        - ``"update"`` + ``view``: replace this view (same id, new hash); ``"push"`` + ``view``: push it;
        - ``"clear"``: close all of the user's views.

        A non-200 answer, one later than ``ack_timeout_seconds`` seconds, or a malformed one (bad JSON,
        unknown block ids in ``errors``, an invalid view) leaves the view open with ``response_error`` set,
        as Slack then shows the user an error. Returns the bot's ``(HTTP status, body text)``. Raises as
        ``submit_payload``, RuntimeError without ``interactivity_url``, OSError when the bot is unreachable.
        """
        with self.state.lock:
            record = self.state.views.top_view(view_id, user_id)
            record["view"]["state"]["values"] = modals.state_values(record["view"], values)
            refused = modals.client_errors(record["view"], values)
            record["errors"] = refused
            record["response_error"] = None
            if refused:
                raise SubmissionRefused(refused)
            payload = self.submit_payload(view_id, user_id, values)
        started = time.monotonic()
        try:
            status, body = self.send_signed(payload)
        except (OSError, RuntimeError) as error:
            with self.state.lock:
                views = self.state.views.records
                if view_id in views:
                    views[view_id]["response_error"] = f"the submission was not delivered: {error}"
            raise
        with self.state.lock:
            self._apply_answer(view_id, user_id, status, body, time.monotonic() - started)
        return status, body

    def _apply_answer(
        self, view_id: str, user_id: str, status: int, body: str, elapsed_seconds: float
    ) -> None:
        views = self.state.views
        record = views.records.get(view_id)
        if record is None:
            return
        try:
            if status != 200:
                raise ValueError(f"the bot answered HTTP {status}")
            if elapsed_seconds > self.ack_timeout_seconds:
                raise ValueError(
                    f"the bot answered after {elapsed_seconds:.1f} s; "
                    f"Slack waits {self.ack_timeout_seconds} s"
                )
            answer = modals.parse_answer(body)
            action = answer.get("response_action")
            if action is None:
                views.close_view(view_id)
            elif action == "errors":
                inputs = {block["block_id"] for block, _ in modals.input_blocks(record["view"])}
                unknown = sorted(set(answer["errors"]) - inputs)
                if unknown:
                    raise ValueError(f"errors name blocks that are not inputs of the view: {unknown}")
                record["errors"] = dict(answer["errors"])
            elif action == "update":
                views.update_view(record, modals.decode_view(answer["view"]), self.team_id)
            elif action == "push":
                views.push_view(user_id, modals.decode_view(answer["view"]), self.team_id)
            else:
                views.clear_views(user_id)
        except (ValueError, ViewError) as problem:
            record["response_error"] = str(problem)

    def close_view(self, view_id: str, user_id: str) -> tuple[int, str] | None:
        """Press Close (or the x) on the modal ``view_id`` as ``user_id``.

        The view closes, with every view below it when it set ``clear_on_close``. If it set
        ``notify_on_close``, the signed ``view_closed`` payload (``is_cleared`` true for a cleared stack)
        is then sent and the bot's ``(HTTP status, body text)`` returned; otherwise nothing is sent and
        None returned (https://docs.slack.dev/reference/views/modal-views). Raises LookupError when the
        view is not the one on the user's screen, and as ``send_signed`` when sending.
        """
        with self.state.lock:
            record = self.state.views.top_view(view_id, user_id)
            view = copy.deepcopy(record["view"])
            cleared = bool(view["clear_on_close"])
            if cleared:
                self.state.views.clear_views(user_id)
            else:
                self.state.views.close_view(view_id)
        if not view["notify_on_close"]:
            return None
        payload = view_closed_payload(
            team=self._team(self.team_of(user_id)),
            user=self._actor(user_id),
            view=view,
            is_cleared=cleared,
        )
        return self.send_signed(payload)

    # --- who acts, from which workspace ----------------------------------------------------------------

    def _actor(self, user_id: str) -> Json:
        """A payload's ``user``: the id, the name (twice, as Slack sends it) and the user's own workspace."""
        name = self.users.get(user_id, user_id)
        return {"id": user_id, "username": name, "name": name, "team_id": self.team_of(user_id)}

    def _team(self, team_id: str) -> Json:
        """A payload's ``team``; a partner workspace's domain is its id in lower case (a sandbox choice)."""
        return {"id": team_id, "domain": TEAM_DOMAIN if team_id == self.team_id else team_id.lower()}

    # --- delivery ----------------------------------------------------------------------------------------

    def send_signed(
        self, payload: Json, *, timestamp: int | None = None, secret: str | None = None
    ) -> tuple[int, str]:
        """POST ``payload`` to ``interactivity_url`` as Slack does: form body ``payload=<json>``, signed.

        ``timestamp`` (unix seconds, default now) and ``secret`` (default ``signing_secret``) can be
        overridden to produce stale or forged requests. Returns ``(HTTP status, body text)``.
        """
        return self._send_form(encode_payload(payload), timestamp, secret)

    def _send_form(
        self, body: bytes, timestamp: int | None = None, secret: str | None = None, content_type: str = FORM
    ) -> tuple[int, str]:
        if not self.interactivity_url:
            raise RuntimeError("interactivity_url is not set")
        return signed_post(
            self.interactivity_url,
            body,
            secret=self.signing_secret if secret is None else secret,
            timestamp=int(time.time()) if timestamp is None else timestamp,
            content_type=content_type,
        )

    # --- the App Home tab ------------------------------------------------------------------------------

    def open_home(self, user_id: str) -> tuple[int, str]:
        """Open the app's Home tab as ``user_id``: post the signed ``app_home_opened`` event (a JSON
        body, to ``interactivity_url``, which stands for the app's event Request URL too) and return
        the bot's ``(HTTP status, body text)``. Raises as ``send_signed``."""
        with self.state.lock:
            home = copy.deepcopy(self.state.homes.get(user_id))
            channel = self.state.open_dm([user_id])
        body = app_home_opened_body(team_id=self.team_id, user_id=user_id, channel=channel, view=home)
        return self._send_form(json.dumps(body).encode(), content_type="application/json")

    def home(self, user_id: str) -> Json | None:
        """A copy of ``user_id``'s Home tab as last published (views.publish), or None."""
        with self.state.lock:
            return copy.deepcopy(self.state.homes.get(user_id))

    def click_home(self, user_id: str, block_id: str, action_id: str) -> tuple[int, str]:
        """Press the button ``action_id`` of block ``block_id`` on ``user_id``'s Home tab: send the
        signed ``block_actions`` payload (``interactivity.home_block_actions_payload``) with a
        recorded ``trigger_id``. Raises LookupError when the Home or the button is not there, and as
        ``send_signed``."""
        with self.state.lock:
            home = self.state.homes.get(user_id)
            blocks = [b for b in (home or {}).get("blocks", []) if b.get("block_id") == block_id]
            if home is None or not blocks:
                raise LookupError(f"no block {block_id!r} on the Home tab of {user_id!r}")
            block, button = find_button(blocks, action_id)
            payload = home_block_actions_payload(
                team=self._team(self.team_id),
                user=self._actor(user_id),
                view=copy.deepcopy(home),
                block_id=block["block_id"],
                button=button,
                trigger_id=self.state.views.issue_trigger(user_id, self.clock()),
            )
        return self.send_signed(payload)

    # --- slash commands ----------------------------------------------------------------------------------

    def command_fields(
        self, user_id: str, channel: str, text: str, command: str = "/countersign"
    ) -> dict[str, str]:
        """The form fields Slack would post if ``user_id`` typed ``command text`` in ``channel`` now,
        with a fresh ``response_url`` (answered by ``webapi.response_urls.respond``: by default an
        ephemeral message to ``user_id`` in ``channel``) and a recorded ``trigger_id``."""
        with self.state.lock:
            key = secrets.token_urlsafe(16)
            self.state.response_urls[key] = ResponseUrl(channel, "", user_id, self.clock())
            return slash_command_fields(
                team=self._team(self.team_id),
                user=self._actor(user_id),
                channel_id=channel,
                command=command,
                text=text,
                response_url=f"{self.base_url or UNSERVED_BASE_URL}{RESPONSE_URL_PATH}{key}",
                trigger_id=self.state.views.issue_trigger(user_id, self.clock()),
            )

    def run_command(
        self, user_id: str, channel: str, text: str, command: str = "/countersign"
    ) -> tuple[int, str]:
        """Type ``command text`` in ``channel`` as ``user_id``: post the signed form (``command_fields``)
        to ``interactivity_url`` as Slack does, and return the bot's ``(HTTP status, body text)``.

        As in Slack, a 200 answer with a JSON body holding ``text`` or ``blocks`` is shown at once, to
        ``user_id`` alone unless its ``response_type`` is ``in_channel``; an empty 200 shows nothing
        (the bot answers later through the ``response_url``)
        (https://docs.slack.dev/interactivity/implementing-slash-commands). Raises as ``send_signed``.
        """
        fields = self.command_fields(user_id, channel, text, command)
        status, body = self._send_form(urllib.parse.urlencode(fields).encode())
        if status == 200 and body.strip():
            try:
                answer = json.loads(body)
            except ValueError:
                answer = {"text": body}
            if isinstance(answer, dict) and (answer.get("text") or answer.get("blocks")):
                key = fields["response_url"].rsplit("/", 1)[1]
                respond(self, key, answer)
        return status, body
