import asyncio
import random

import pytest

from kaiwo_ctrl.runtime.control.ratelimit import (
    ItemExponentialFailureRateLimiter,
    default_controller_rate_limiter,
)
from kaiwo_ctrl.runtime.control.workqueue import WorkQueue


class FakeClock:
    def __init__(self, t: float = 500.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


async def settle(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def q(clock):
    queue: WorkQueue[str] = WorkQueue("test", clock=clock)
    yield queue
    queue.shutdown()


# --- core structure -----------------------------------------------------------


async def test_adds_before_get_are_deduplicated(q):
    for _ in range(5):
        q.add("a")
    q.add("b")
    q.add("a")
    assert len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"
    assert len(q) == 0
    q.done("a")
    q.done("b")
    assert len(q) == 0


async def test_fifo_order(q):
    for k in ["c", "a", "b"]:
        q.add(k)
    assert [await q.get() for _ in range(3)] == ["c", "a", "b"]


async def test_add_during_processing_gives_exactly_one_more_run(q):
    q.add("a")
    assert await q.get() == "a"
    # three changes arrive while "a" is being processed
    q.add("a")
    q.add("a")
    q.add("a")
    assert len(q) == 0  # deferred, not handed to a second worker
    getter = asyncio.create_task(q.get())
    await settle()
    assert not getter.done()
    q.done("a")
    assert await asyncio.wait_for(getter, 1) == "a"
    q.done("a")
    assert len(q) == 0
    # nothing else is pending for "a"
    late = asyncio.create_task(q.get())
    await settle()
    assert not late.done()
    late.cancel()
    with pytest.raises(asyncio.CancelledError):
        await late


async def test_done_without_changes_does_not_requeue(q):
    q.add("a")
    await q.get()
    q.done("a")
    assert len(q) == 0
    q.done("a")  # a second done is harmless
    q.done("never-got")
    assert len(q) == 0


async def test_get_wakes_on_add(q):
    getter = asyncio.create_task(q.get())
    await settle()
    assert not getter.done()
    q.add("x")
    assert await asyncio.wait_for(getter, 1) == "x"


async def test_cancelled_getter_passes_wakeup_on(q):
    g1 = asyncio.create_task(q.get())
    g2 = asyncio.create_task(q.get())
    await settle()
    q.add("a")  # wakes g1 ...
    g1.cancel()  # ... which is cancelled before it can take the key
    assert await asyncio.wait_for(g2, 1) == "a"
    assert g1.cancelled()


async def test_ten_workers_never_share_a_key_and_no_update_is_lost():
    rng = random.Random(1234)
    q: WorkQueue[str] = WorkQueue("concurrency")
    keys = [f"k{i}" for i in range(6)]
    in_flight: set[str] = set()
    violations: list[str] = []
    max_parallel = 0
    runs: dict[str, int] = {k: 0 for k in keys}
    step = 0
    last_add: dict[str, int] = {}
    last_start: dict[str, int] = {}

    async def worker() -> None:
        nonlocal max_parallel, step
        while True:
            key = await q.get()
            if key is None:
                return
            if key in in_flight:
                violations.append(key)
            in_flight.add(key)
            max_parallel = max(max_parallel, len(in_flight))
            step += 1
            last_start[key] = step
            runs[key] += 1
            for _ in range(rng.randint(0, 4)):
                await asyncio.sleep(0)
            in_flight.discard(key)
            q.done(key)

    async def producer() -> None:
        nonlocal step
        for _ in range(3000):
            key = rng.choice(keys)
            step += 1
            last_add[key] = step
            q.add(key)
            if rng.random() < 0.5:
                await asyncio.sleep(0)

    workers = [asyncio.create_task(worker()) for _ in range(10)]
    await producer()
    # let the workers finish what is pending, then stop them
    for _ in range(1000):
        if len(q) == 0 and not in_flight:
            break
        await asyncio.sleep(0)
    await asyncio.wait_for(q.shutdown_with_drain(), 5)
    await asyncio.wait_for(asyncio.gather(*workers), 5)

    assert violations == []
    assert max_parallel > 1  # the workers really did run concurrently
    assert sum(runs.values()) < 3000  # adds were coalesced
    for key in keys:
        # every key was processed (started) after its last add
        assert last_start[key] > last_add[key], key


# --- delayed adds ---------------------------------------------------------------


async def test_add_after_orders_by_ready_time(q, clock):
    q.add_after("late", 3)
    q.add_after("early", 1)
    q.add_after("middle", 2)
    assert len(q) == 0
    assert q.waiting_count() == 3
    clock.advance(0.999)
    assert q.add_ready() == 0
    clock.advance(0.001)
    assert q.add_ready() == 1
    clock.advance(5)
    assert q.add_ready() == 2
    assert [await q.get() for _ in range(3)] == ["early", "middle", "late"]
    assert q.waiting_count() == 0


async def test_add_after_earlier_ready_time_wins(q, clock):
    q.add_after("a", 10)
    q.add_after("a", 2)  # shortens the wait
    clock.advance(2)
    assert q.add_ready() == 1
    assert await q.get() == "a"
    q.done("a")

    q.add_after("b", 1)
    q.add_after("b", 5)  # cannot extend the wait
    clock.advance(1)
    assert q.add_ready() == 1
    clock.advance(10)
    assert q.add_ready() == 0  # the superseded entry does not add it twice
    assert len(q) == 1


async def test_add_after_non_positive_delay_is_immediate(q):
    q.add_after("a", 0)
    q.add_after("b", -1)
    assert len(q) == 2
    assert q.waiting_count() == 0


async def test_ready_key_goes_through_dedupe_and_processing_rules(q, clock):
    q.add("a")
    assert await q.get() == "a"
    q.add_after("a", 1)
    clock.advance(1)
    assert q.add_ready() == 1
    assert len(q) == 0  # "a" is processing: deferred until done
    q.done("a")
    assert len(q) == 1


async def test_background_task_delivers_in_ready_order_with_real_time():
    q: WorkQueue[str] = WorkQueue("real-time")
    try:
        q.add_after("a", 0.03)
        q.add_after("b", 0.01)
        q.add("c")
        got = [await asyncio.wait_for(q.get(), 2) for _ in range(3)]
        assert got == ["c", "b", "a"]
    finally:
        q.shutdown()


async def test_add_after_from_outside_a_loop_starts_timer_on_first_get():
    q: WorkQueue[str] = WorkQueue("no-loop-yet")

    def schedule_sync() -> None:  # no running loop in a plain thread
        q.add_after("a", 0.01)

    await asyncio.to_thread(schedule_sync)
    try:
        assert await asyncio.wait_for(q.get(), 2) == "a"
    finally:
        q.shutdown()


# --- rate limiting --------------------------------------------------------------


async def test_rate_limited_backoff_sequence(clock):
    q: WorkQueue[str] = WorkQueue(
        "rl", rate_limiter=ItemExponentialFailureRateLimiter(base=0.005, cap=1000), clock=clock
    )
    try:
        expected = [0.005, 0.01, 0.02, 0.04, 0.08]
        for n, delay in enumerate(expected):
            q.add_rate_limited("k")
            assert q.num_requeues("k") == n + 1
            clock.advance(delay * 0.99)
            assert q.add_ready() == 0
            clock.advance(delay * 0.02)
            assert q.add_ready() == 1
            assert await q.get() == "k"
            q.done("k")
        # forget resets the history: the next delay is the base again
        q.forget("k")
        assert q.num_requeues("k") == 0
        q.add_rate_limited("k")
        clock.advance(0.0049)
        assert q.add_ready() == 0
        clock.advance(0.0002)
        assert q.add_ready() == 1
    finally:
        q.shutdown()


async def test_default_limiter_is_the_controller_default(clock):
    q: WorkQueue[str] = WorkQueue("default-rl", clock=clock)
    try:
        q.add_rate_limited("k")
        q.add_rate_limited("k")  # earlier ready time (5 ms) wins over 10 ms
        assert q.num_requeues("k") == 2
        clock.advance(0.005)
        assert q.add_ready() == 1
    finally:
        q.shutdown()
    assert type(default_controller_rate_limiter()).__name__ == "MaxOfRateLimiter"


async def test_forget_does_not_remove_from_queue(q):
    q.add_rate_limited("k")
    q.forget("k")
    assert q.waiting_count() == 1
    q.add("x")
    q.forget("x")
    assert len(q) == 1


# --- shutdown -------------------------------------------------------------------


async def test_shutdown_hands_out_queued_keys_then_none(q):
    q.add("a")
    q.add("b")
    q.add_after("delayed", 1)
    q.shutdown()
    assert q.shutting_down
    q.add("c")  # ignored
    q.add_after("d", 0)  # ignored
    q.add_rate_limited("e")  # ignored
    assert await q.get() == "a"
    assert await q.get() == "b"
    assert await q.get() is None
    assert await q.get() is None
    assert q.waiting_count() == 0


async def test_shutdown_wakes_all_waiting_getters(q):
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await settle()
    assert not any(g.done() for g in getters)
    q.shutdown()
    assert await asyncio.wait_for(asyncio.gather(*getters), 1) == [None, None, None]


async def test_shutdown_cancels_the_delay_task():
    q: WorkQueue[str] = WorkQueue("timer")
    q.add_after("a", 60)
    task = q._timer_task
    assert task is not None and not task.done()
    q.shutdown()
    await settle()
    assert task.cancelled()


async def test_shutdown_with_drain_waits_for_done(q):
    q.add("a")
    q.add("b")
    assert await q.get() == "a"
    drained = asyncio.create_task(q.shutdown_with_drain())
    await settle()
    assert not drained.done()
    assert q.shutting_down
    # queued key is still handed out during the drain
    assert await q.get() == "b"
    q.done("a")
    await settle()
    assert not drained.done()  # "b" is still processing
    q.done("b")
    await asyncio.wait_for(drained, 1)
    assert await q.get() is None


async def test_shutdown_with_drain_returns_at_once_when_idle(q):
    await asyncio.wait_for(q.shutdown_with_drain(), 1)
    assert await q.get() is None
