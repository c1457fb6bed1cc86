"""The fixed names of the sandbox workspace: its bot, team, app, default people and user groups, and the
addresses its payloads point at.
"""

from __future__ import annotations

BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
BOT_NAME = "countersign"
TEAM_NAME = "Sandbox"
TEAM_DOMAIN = "sandbox"
#: App id carried in every interactivity payload and modal view.
API_APP_ID = "A0SANDBOX"
#: Stand-in base URL used for links (auth.test ``url``, ``response_url``) before ``serve`` sets the real one.
UNSERVED_BASE_URL = "http://sandbox.invalid"
#: Path prefix of the ``response_url`` handed out with each click; the server answers POSTs under it.
RESPONSE_URL_PATH = "/_sandbox/response/"
#: The default people in the workspace: user id -> display name.
DEFAULT_USERS: dict[str, str] = {
    "U0LEAD": "lee.lead",
    "U0ALICE": "alice",
    "U0BOB": "bob",
    "U0MALLORY": "mallory",
}
#: User groups (``usergroups.users.list``): group id -> member user ids. Settable as ``sb.usergroups``.
DEFAULT_USERGROUPS: dict[str, list[str]] = {
    "S0FINANCE": ["U0ALICE", "U0BOB"],
    "S0FINLEADS": ["U0LEAD"],
}
