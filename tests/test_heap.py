"""`heap.freeze_loaded`: what is alive is frozen out of the collector's reach; later garbage is not."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from countersign.heap import freeze_loaded


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Give the test process its frozen objects back to the collector afterwards."""
    yield
    gc.unfreeze()


class _Node:
    """A reference cycle's member: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_the_objects_alive_are_frozen_and_start_up_garbage_is_collected_first(unfrozen: None) -> None:
    kept, garbage = _Node(), _Node()
    gone = weakref.ref(garbage)
    del garbage

    frozen = freeze_loaded()

    assert gone() is None  # collected, not frozen for ever
    assert frozen == gc.get_freeze_count() > 0
    assert not any(obj is kept for obj in gc.get_objects())  # frozen: no collection looks at it


def test_a_cycle_made_after_the_freeze_is_still_collected(unfrozen: None) -> None:
    freeze_loaded()
    later = _Node()
    gone = weakref.ref(later)
    del later

    gc.collect()

    assert gone() is None
