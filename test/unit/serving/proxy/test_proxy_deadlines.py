"""The proxy's request deadlines: one sweep cancels the tasks whose deadline passed, never early,
and a client that went away is not taken for a deadline."""

from __future__ import annotations

import asyncio

import pytest

from kaiwo_ctrl.serving.proxy.deadlines import Deadlines


async def _guarded(d: Deadlines, seconds: float, work: float) -> str:
    task = asyncio.current_task()
    assert task is not None
    d.arm(task, seconds)
    try:
        await asyncio.sleep(work)
        return "done"
    except asyncio.CancelledError:
        if d.disarm(task):
            return "deadline"
        raise
    finally:
        d.disarm(task)


async def test_deadline_cancels_once_passed_and_not_before():
    d = Deadlines(tick=0.02)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await _guarded(d, 0.1, 5) == "deadline"
    assert 0.1 <= loop.time() - t0 < 2
    assert len(d) == 0 and d._timer is None  # nothing armed: no sweep either


async def test_finished_in_time_is_left_alone_and_forgotten():
    d = Deadlines(tick=0.02)
    assert await _guarded(d, 5, 0.01) == "done"
    assert len(d) == 0
    await asyncio.sleep(0.05)
    assert d._timer is None


async def test_a_client_cancel_stays_a_cancel():
    d = Deadlines(tick=0.02)
    task = asyncio.create_task(_guarded(d, 5, 5))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(d) == 0


async def test_a_client_cancel_with_the_deadline_is_still_a_cancel():
    d = Deadlines(tick=10)  # swept by hand
    seen: list[bool] = []

    async def slow() -> None:
        task = asyncio.current_task()
        assert task is not None
        d.arm(task, 0)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append(d.disarm(task))
            raise

    task = asyncio.create_task(slow())
    await asyncio.sleep(0)  # it arms and waits
    d._sweep(asyncio.get_running_loop())  # its deadline passed: cancelled
    task.cancel()  # and its client went away before it ran again
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [False]
    d.close()


async def test_many_requests_one_sweep():
    d = Deadlines(tick=0.02)
    results = await asyncio.gather(*(_guarded(d, 0.05 if i % 2 else 10, 0.2 if i % 2 else 0.01) for i in range(50)))
    assert results.count("deadline") == 25 and results.count("done") == 25
    assert len(d) == 0
