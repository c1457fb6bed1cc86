#!/bin/sh
# An agent with curl alone (no Python): ask for approval over countersign's HTTP API, long-poll the
# decision, claim its single execution, run the refund when claimed, report the outcome. README,
# "HTTP API".
#
#   COUNTERSIGN_TOKEN=$(countersign token create --requester refund-agent --actions issue_refund) \
#     sh examples/curl_agent.sh
#
# COUNTERSIGN_URL (default http://127.0.0.1:3000) is `countersign web`; RUN_ID (default: the time)
# makes the idempotency key, so running it again with the same RUN_ID gets the same request back,
# and the claim refuses to run its refund a second time.
set -eu
URL=${COUNTERSIGN_URL:-http://127.0.0.1:3000}
TOKEN=${COUNTERSIGN_TOKEN:?set COUNTERSIGN_TOKEN (countersign token create --requester refund-agent --actions issue_refund)}
RUN_ID=${RUN_ID:-$(date +%s)}
AUTH="Authorization: Bearer $TOKEN"
answer=$(mktemp)
trap 'rm -f "$answer"' EXIT

# 1. Create the approval request (202 with its id; the same key and payload again: the same id).
# No `resume`: this agent takes its decision by long poll.
curl -sS --fail-with-body -o "$answer" -X POST "$URL/v1/requests" \
  -H "$AUTH" -H "Content-Type: application/json" -H "Idempotency-Key: refund-agent:$RUN_ID:refund" \
  -d '{"action": "issue_refund", "requester": "refund-agent",
       "payload": {"amount": "120.00", "currency": "USD", "customer": "ACME"},
       "summary": "Refund ACME", "reason": "duplicate charge"}'
request_id=$(sed -n 's/.*"request_id":"\([0-9A-Z]*\)".*/\1/p' "$answer")
echo "request $request_id: waiting for a reviewer" >&2

# 2. Long-poll the decision: 204 means not yet (after up to 30 s), 200 carries it. No answer (web
# restarting: connection refused or reset) or a 502/503/504 is asked again: the request waits in the
# database, not in the connection.
while :; do
  status=$(curl -sS -o "$answer" -w '%{http_code}' -H "$AUTH" "$URL/v1/requests/$request_id/decision?wait=30") \
    || status=000
  case $status in
    200) break ;;
    204) ;;
    000 | 502 | 503 | 504) echo "countersign did not answer ($status); asking again in 2 s" >&2; sleep 2 ;;
    *) echo "countersign answered $status: $(cat "$answer")" >&2; exit 1 ;;
  esac
done
outcome=$(sed -n 's/.*"outcome":"\([a-z]*\)".*/\1/p' "$answer")
if [ "$outcome" != approved ]; then
  echo "request $request_id was $outcome; nothing to run" >&2
  exit 0
fi

# 3. Claim the single execution: the grant is checked (signed for exactly this payload, not expired)
# and the approval is used up, so running this script again with the same RUN_ID is refused here
# (409, with the reason: e.g. already_executed) instead of refunding twice. Then run what was
# approved (the decision's "payload": a reviewer may have lowered the amount), and report the
# outcome: it closes the audit record and shows on the card.
claimed=$(mktemp)
trap 'rm -f "$answer" "$claimed"' EXIT
status=$(curl -sS -o "$claimed" -w '%{http_code}' -X POST "$URL/v1/requests/$request_id/execution" \
  -H "$AUTH" -H "Content-Type: application/json" --data-binary @"$answer")
if [ "$status" != 200 ]; then
  echo "REFUND REFUSED ($status): $(cat "$claimed")" >&2
  exit 1
fi
payload=$(sed -n 's/.*"payload":\({[^}]*}\).*/\1/p' "$answer")
echo "REFUND EXECUTED: $payload"
curl -sS --fail-with-body -X POST "$URL/v1/requests/$request_id/outcome" \
  -H "$AUTH" -H "Content-Type: application/json" -d '{"ok": true, "detail": "refunded by curl_agent.sh"}'
echo
