"""Supervised tasks restart after a crash and are reported when crash-looping;
watch-stream lines are split in linear time."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from kaiwo_ctrl.runtime.process import supervise as sup
from kaiwo_ctrl.runtime.api.wire import LineSplitter
from kaiwo_ctrl.runtime.control.controller import Controller
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.control.workqueue import WorkQueue
from support import eventually


async def test_crashed_task_is_logged_and_restarted(caplog):
    runs = []

    async def flaky() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="kaiwo_ctrl.runtime.process.supervise"):
        task = sup.supervise("flaky", flaky, initial_delay=0.001)
        await asyncio.wait_for(task, 5)
    assert len(runs) == 3
    assert task.supervised.crashes == 2
    # the traceback is logged once; the identical repeat gets one line
    with_tb = [r for r in caplog.records if r.exc_info]
    assert len(with_tb) == 1 and len(caplog.records) == 2


async def test_crash_loop_fails_the_health_check():
    async def always() -> None:
        raise RuntimeError("broken for good")

    task = sup.supervise("looping", always, initial_delay=0.001, max_delay=0.001)
    try:
        await eventually(lambda: "looping" in sup.crash_looping(), timeout=5, what="crash loop reported")
        from kaiwo_ctrl.runtime.manager.manager import _check_crash_loops

        assert "looping" in (_check_crash_loops() or "")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_cancel_stops_a_supervised_task():
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    task = sup.supervise("forever", forever)
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.supervised.crashes == 0


async def test_controller_worker_that_dies_is_restarted():
    seen = []

    async def reconcile(req: Request) -> None:
        seen.append(req.name)

    ctl = Controller("t", reconcile, workers=1)
    real_get, broken = ctl.queue.get, {"left": 1}

    async def get_once_broken():  # the worker loop itself fails once, outside any reconcile
        if broken["left"]:
            broken["left"] -= 1
            raise RuntimeError("queue broke")
        return await real_get()

    ctl.queue.get = get_once_broken  # type: ignore[method-assign]
    await ctl.start()
    ctl.enqueue(Request("", "a"))
    await eventually(lambda: seen == ["a"], timeout=5, what="reconciled by the restarted worker")
    assert ctl._tasks[0].supervised.crashes == 1
    await ctl.stop()


async def test_workqueue_timer_that_dies_is_restarted():
    q: WorkQueue[str] = WorkQueue("timer")
    real, broken = q.add_ready, {"left": 1}

    def add_ready_once_broken() -> int:
        if broken["left"]:
            broken["left"] -= 1
            raise RuntimeError("timer broke")
        return real()

    q.add_ready = add_ready_once_broken  # type: ignore[method-assign]
    q.add_after("k", 0.01)
    assert await asyncio.wait_for(q.get(), 5) == "k"
    q.shutdown()


async def _chunks(parts):
    for p in parts:
        yield p


async def _lines(parts) -> list[bytes]:
    """The non-blank lines of a chunked stream, as the watch splits them."""
    splitter = LineSplitter()
    return [line async for chunk in _chunks(parts) for line in splitter.feed(chunk)]


async def test_split_lines_across_chunks():
    assert await _lines([b'{"a":1}\n{"b"', b':2}\n\n', b'{"c":3}\n{"cut']) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert await _lines([b"x", b"y", b"z\n"]) == [b"xyz"]


async def test_split_lines_is_linear():
    """Doubling the events roughly doubles the time (a copy per event would quadruple it)."""
    event = b'{"type":"ADDED","object":{"metadata":{"name":"' + b"x" * 200 + b'"}}}\n'

    async def timed(n: int) -> float:
        chunk = event * n  # one big chunk: the old split copied the rest of it per line
        t0 = time.perf_counter()
        count = len(await _lines([chunk]))
        assert count == n
        return time.perf_counter() - t0

    small, big = await timed(20000), await timed(80000)
    assert big < small * 4 * 2.5, (small, big)  # linear: ~4x; quadratic would be ~16x
