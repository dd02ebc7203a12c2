"""runtime.process.heap: settling freezes the survivors, collecting first unless told not to."""

from __future__ import annotations

import gc
import weakref

import pytest

from kaiwo_ctrl.runtime.process import heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def _unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_settle_collects_garbage_then_freezes_survivors():
    dead = _cycle()
    alive = [_Node()]
    heap.settle()
    assert dead() is None
    assert gc.get_freeze_count() > 0
    assert not any(o is alive for o in gc.get_objects())  # frozen objects are out of the collector's lists


def test_settle_without_collecting_freezes_even_the_garbage():
    gc.collect()
    dead = _cycle()
    heap.settle(collect=False)
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert dead() is not None  # frozen: no pass walks it
    gc.unfreeze()
    gc.collect()
    assert dead() is None
