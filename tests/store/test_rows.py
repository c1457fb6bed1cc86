"""Plain request rows (`store/rows.py`): what the cycle's hot paths return instead of ORM objects."""

from __future__ import annotations

from dataclasses import fields

from sqlalchemy import select
from sqlalchemy.orm import Session

from countersign.store import ApprovalRequest, Decided, Outcome, RequestRow, Store
from tests.helpers import anyone
from tests.helpers.builders import new_request, resume

VOTER = {"slack_user_id": "U1", "name": "ana"}


def _orm(store: Store, request_id: str) -> ApprovalRequest:
    with Session(store.engine) as session:
        return session.scalars(select(ApprovalRequest).where(ApprovalRequest.id == request_id)).one()


def _columns(request: ApprovalRequest | RequestRow) -> dict[str, object]:
    return {each.name: getattr(request, each.name) for each in fields(RequestRow)}


def test_a_row_has_the_tables_columns_in_its_order() -> None:
    assert [each.name for each in fields(RequestRow)] == [c.key for c in ApprovalRequest.__table__.columns]


def test_the_hot_paths_return_the_row_the_orm_would_load(store: Store) -> None:
    created = new_request(store, approvers=["U1"], context={"ticket": 7})
    assert isinstance(created, RequestRow)
    read = store.get(created.id)
    assert isinstance(read, RequestRow)
    assert _columns(read) == _columns(_orm(store, created.id)) == _columns(created)
    assert read.eligible_approvers == ["U1"] and read.payload_to_run == read.payload

    decided = store.vote(created.id, VOTER, Outcome.APPROVED, resume, refuse=anyone)
    assert isinstance(decided, Decided) and isinstance(decided.request, RequestRow)
    orm = _orm(store, created.id)
    assert _columns(decided.request) == _columns(orm)
    assert [type(value) for value in _columns(decided.request).values()] == [
        type(value) for value in _columns(orm).values()
    ]
    facts = store.card_facts(created.id)
    assert facts is not None and _columns(facts.request) == _columns(orm)
