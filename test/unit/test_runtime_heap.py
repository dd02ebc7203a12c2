"""The cyclic collector's start-up pause (runtime/heap.py)."""

from __future__ import annotations

import gc

from kaiwo_ctrl.runtime import heap


def test_collector_pause_only_at_start_up(monkeypatch):
    monkeypatch.setattr(heap._Pauses, "done", False)
    monkeypatch.setattr(heap._Pauses, "holders", 0)
    monkeypatch.setattr(heap, "_startup", None)
    frozen = gc.get_freeze_count()
    try:
        heap.pause_startup()  # the command, before its imports
        a, b = heap.CollectorPause(), heap.CollectorPause()  # two informers filling
        assert not gc.isenabled()
        a.release()
        a.release()  # idempotent
        assert not gc.isenabled()
        b.release()
        assert not gc.isenabled()  # the command's pause still holds
        kept = [object()]  # alive when the pause ends: frozen out of later collections
        heap.end_startup()
        heap.end_startup()
        assert gc.isenabled() and gc.get_freeze_count() > frozen and kept
        later = heap.CollectorPause()  # a relist after start-up: no pause
        assert gc.isenabled()
        later.release()
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
