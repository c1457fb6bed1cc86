"""The Slack Web API the sandbox serves at ``/api/<method>``, one module per method family.

Every method answers as Slack does (https://docs.slack.dev/apis/web-api/): HTTP 200 with
``{"ok": true, ...}`` or ``{"ok": false, "error": "<code>"}``. ``dispatch.handle`` answers one call: it
records it (``Sandbox.calls``), checks the token, applies faults queued by ``Sandbox.inject`` and runs the
method from ``methods.METHODS``. ``response_urls.respond`` answers POSTs to a click's ``response_url``.

To add a method, write ``def handler(ws: Workspace, params: Params) -> ApiResponse`` in its family's
module and register it in ``methods.METHODS``. Handlers run while holding ``ws.state.lock`` and signal
errors by raising ``answers.ApiError`` (or ``modals.ViewError`` for views.*).
"""
