"""A plain decorator for code without an agent framework: a call asks for approval instead of running.

    @requires_approval(action="issue_refund", summary="Refund {amount} {currency}", queue="refund-agent")
    def issue_refund(amount: str, currency: str) -> str:
        return payments.refund(amount, currency)

    handle = issue_refund("120.00", "USD")      # enqueues the approval request; nothing runs here
    decision = handle.wait(timeout=600)          # optional: the typed Decision, once decided

The call's arguments, bound to the function's parameters, are the request's payload. The function
itself runs later, on the agent's RQ worker (`countersign agent-worker QUEUE`), as the request's
resume job `<module>.<function>.resume`: through `approved_action`, so only for a valid, unexpired
grant, once, and only with the approved payload (a reviewer's edit included) as its keyword
arguments. A rejected or expired request runs nothing. Needs no extra package.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..agent import ApprovalClient, Decision, approved_action
from ..connections import current
from ..exceptions import InvalidRequest
from ..schema import payload_sha256

T = TypeVar("T")
KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True)
class PendingApproval:
    """What a call of a `requires_approval` function returns: its approval request, not yet decided."""

    request_id: str
    client: ApprovalClient

    def wait(self, timeout: float) -> Decision:
        """Block until the request is decided, at most `timeout` seconds (`ApprovalClient.wait`:
        raises `WaitTimeout`, the request staying pending, and `RequestDeadLettered`). The function
        runs on the agent's worker either way; this only tells the caller how it was decided."""
        return self.client.wait(self.request_id, timeout=timeout)


class ApprovalGated(Generic[T]):
    """A function whose calls ask for approval (`requires_approval`); `resume` is its resume job."""

    def __init__(
        self, fn: Callable[..., T], action: str, summary: str, queue: str, requester: str | None
    ) -> None:
        self._signature = _keyword_signature(fn)
        self._fn = fn
        self._fields = {"action": action, "requester": requester or _module_name(fn)}
        self._summary = summary
        self._name = f"{_module_name(fn)}.{fn.__qualname__}"
        self._resume = {"queue": queue, "func": f"{self._name}.resume"}
        self.resume = approved_action(self._run)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> PendingApproval:
        """Enqueue the approval request for this call and return its handle. The idempotency key is
        the function's name and the payload's SHA-256: calling again with the same arguments (a
        retry) is the same request. Raises `TypeError` for arguments the function does not take,
        `InvalidRequest` for a payload that is not JSON, and what `ApprovalClient.request` raises."""
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        payload = dict(bound.arguments)
        client = ApprovalClient.on(current())
        request_id = client.request(
            self._fields,
            payload=payload,
            summary=self._summary.format(**payload),
            idempotency_key=f"{self._name}:{_payload_key(payload)}",
            resume=self._resume,
        )
        return PendingApproval(request_id, client)

    def _run(self, payload: dict[str, Any]) -> T:
        return self._fn(**payload)


def requires_approval(
    *, action: str, summary: str, queue: str, requester: str | None = None
) -> Callable[[Callable[..., T]], ApprovalGated[T]]:
    """Decorator: calls of the function ask for approval of `action` (an action class of the
    policy) and return a `PendingApproval`; the function runs on the worker of the RQ `queue` once
    approved. `summary` is the card's headline, a `str.format` template of the arguments by name
    (e.g. "Refund {amount} {currency}"). `requester` defaults to the function's module.

    The function must be importable by name on the worker (defined at a module's top level) and
    take its arguments by keyword (no `*args`, `**kwargs` or positional-only parameters); else
    `TypeError` at decoration.
    """

    def decorate(fn: Callable[..., T]) -> ApprovalGated[T]:
        return ApprovalGated(fn, action, summary, queue, requester)

    return decorate


def _module_name(fn: Callable[..., Any]) -> str:
    """The name the worker imports `fn`'s module by: for a script run as `python -m pkg.mod`, `pkg.mod`
    (not `__main__`, which the worker cannot import). Raises `TypeError` for a script run by path."""
    if fn.__module__ != "__main__":
        return fn.__module__
    spec = sys.modules["__main__"].__spec__
    if spec is None:
        raise TypeError(f"{fn.__qualname__}: run its script with `python -m`, for the worker to import it")
    return spec.name


def _keyword_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """`fn`'s signature; raises `TypeError` unless the worker can import `fn` and call it by keyword."""
    if "<locals>" in fn.__qualname__ or "." in fn.__qualname__:
        raise TypeError(f"{fn.__qualname__}: define it at a module's top level, for the worker to import")
    signature = inspect.signature(fn)
    odd = [p.name for p in signature.parameters.values() if p.kind not in KEYWORD_KINDS]
    if odd:
        raise TypeError(f"{fn.__qualname__}: every parameter must be passable by keyword, not {odd}")
    return signature


def _payload_key(payload: dict[str, Any]) -> str:
    """The payload's SHA-256 (canonical JSON); `InvalidRequest` when it is not JSON."""
    try:
        return payload_sha256(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"payload: the arguments must be JSON values ({exc})") from exc
