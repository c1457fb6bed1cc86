"""The refund agent resumed by webhook instead of an RQ worker: a small HTTP server that takes the
decision countersign POSTs, verifies it with the Standard Webhooks library, answers at once, then
runs it through `examples.refund_agent.resume` (the refund runs once: `execute_approved`).

    python -m examples.webhook_receiver --port 8765
    countersign request --action issue_refund --payload '{"amount": "120.00", "currency": "USD"}' \\
      --summary "Refund ACME" --requester refund-agent --run-id w1 --step s1 \\
      --resume-webhook http://127.0.0.1:8765/decisions

It reads `COUNTERSIGN_WEBHOOK_SECRET` (and, for `execute_approved`, `DATABASE_URL` and
`COUNTERSIGN_SECRET`) from the environment or `.run/.env`, as countersign's commands do. It prints
`WEBHOOK <webhook-id>` for each decision, then the refund agent's line (`REFUND EXECUTED: …`); a
repeat of a `webhook-id` it has taken (countersign did not get the answer) is answered and dropped.
"""

from __future__ import annotations

import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

from countersign.config import load_settings

from .refund_agent import resume


def receiver(hook: Webhook) -> type[BaseHTTPRequestHandler]:
    """The request handler: verify, answer, then run the decision once per `webhook-id`."""
    seen: set[str] = set()

    class Receive(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                decision = hook.verify(body, dict(self.headers))
            except Exception as exc:  # WebhookVerificationError, or ValueError for a malformed header
                print(f"WEBHOOK REFUSED: {exc}", flush=True)
                self.send_response(401)
                self.end_headers()
                return
            self.send_response(204)  # answer first: countersign waits a few seconds at most
            self.end_headers()
            message_id = self.headers["webhook-id"]
            if message_id in seen:
                return
            seen.add(message_id)
            print(f"WEBHOOK {message_id}", flush=True)
            resume(decision)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Receive


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Take countersign's decisions by webhook.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    options = parser.parse_args()
    secret = load_settings().COUNTERSIGN_WEBHOOK_SECRET
    if not secret:
        raise SystemExit("COUNTERSIGN_WEBHOOK_SECRET is not set (`make run` writes one to .run/.env)")
    server = ThreadingHTTPServer((options.host, options.port), receiver(Webhook(secret)))
    print(f"taking decisions on http://{options.host}:{options.port}/decisions", flush=True)
    server.serve_forever()
