"""What reviewers read of a request decided without them, on requests the store decided: an expired
one is "already expired at …" (not "already Expired"), one a policy rule approved is "Approved by
policy" (not "policy (policy)")."""

from __future__ import annotations

from countersign.router.texts import already_decided_text, verdict
from countersign.store import Outcome, Store, TimeoutResult, Via
from tests.helpers.builders import age, new_request, resume


def test_a_request_decided_by_no_reviewer_reads_plainly(store: Store) -> None:
    auto = new_request(store).id
    store.decide(auto, Outcome.APPROVED, [], via=Via.POLICY, resume=resume, reason="auto_approve: rule")
    expired = new_request(store)
    age(store, expired.id, expires_at=-1)
    store.expire([(expired, TimeoutResult.DENY)], resume)

    approved, timed_out = store.get(auto), store.get(expired.id)
    assert approved is not None and timed_out is not None
    assert verdict(approved).startswith("Approved by policy at <!date^")
    assert verdict(approved, plain=True).startswith("approved by policy at ")
    assert already_decided_text(timed_out).startswith("This request was already expired at <!date^")
    assert already_decided_text(timed_out).endswith(
        "with no decision: denied by the policy's timeout; your action changed nothing."
    )
    assert already_decided_text(approved, plain=True).startswith(
        "This request was already approved by policy at "
    )
