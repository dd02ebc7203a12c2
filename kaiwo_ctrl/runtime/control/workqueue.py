"""Deduplicating, rate-limited work queue for controller workers (asyncio).

A queue holds *keys* (any hashable value) that need processing. It keeps three
structures whose interplay gives the guarantees controllers rely on:

* ``_queue``      -- FIFO of keys ready to be handed to a worker;
* ``_dirty``      -- keys that need processing (queued, or waiting behind an
                     in-flight run of the same key);
* ``_processing`` -- keys a worker got from ``get()`` and has not ``done()``.

Resulting guarantees:

1. Any number of ``add(k)`` calls before a worker picks ``k`` up collapse into
   one entry (``k`` is already dirty).
2. A key is never handed to two workers at once: while ``k`` is processing,
   a new ``add(k)`` only marks it dirty; ``done(k)`` then queues it again.
3. Hence a change arriving during processing causes exactly one more run.

Delayed adds (``add_after``) sit in a min-heap of ready times; re-adding a
waiting key can only move its ready time earlier. One background task, started
lazily the first time the queue is used from a running event loop, sleeps until
the next ready time (at most 10 s at a stretch) and feeds due keys through the
normal ``add`` path. ``add_rate_limited`` asks the rate limiter for the delay.

``shutdown()`` makes further adds no-ops and drops delayed keys; keys already
queued are still handed out, after which ``get()`` returns ``None``.
``shutdown_with_drain()`` additionally waits until no key is processing.

Everything runs on one event loop, so no locks are needed; only ``get()`` and
``shutdown_with_drain()`` ever suspend. Time is read from an injectable
``clock`` (monotonic seconds) so the delay and metric logic can be tested
without real waiting; the background task sleeps real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

from kaiwo_ctrl.runtime.control.ratelimit import RateLimiter, default_controller_rate_limiter
from kaiwo_ctrl.runtime.process.supervise import supervise

if TYPE_CHECKING:
    from kaiwo_ctrl.runtime.observe.metrics import WorkQueueMetrics

__all__ = ["WorkQueue"]

K = TypeVar("K", bound=Hashable)

# The delay task re-checks at least this often even with nothing due, as a
# safety net against a missed wake-up.
_MAX_TIMER_SLEEP = 10.0


class WorkQueue(Generic[K]):
    """See the module docstring for the semantics."""

    def __init__(
        self,
        name: str,
        rate_limiter: RateLimiter | None = None,
        metrics: WorkQueueMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._clock = clock
        self._limiter: RateLimiter = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock=clock)
        )
        self._metrics = metrics

        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._shutting_down = False

        # get() callers parked until a key is queued or shutdown happens.
        self._waiters: deque[asyncio.Future[None]] = deque()
        # shutdown_with_drain() callers parked until processing is empty.
        self._drain_waiters: list[asyncio.Future[None]] = []

        # For metrics: when each dirty episode started, when each get happened.
        self._added_at: dict[K, float] = {}
        self._started_at: dict[K, float] = {}

        # Delayed keys: heap of (ready_at, seq, key); _waiting holds the live
        # (ready_at, seq) per key, older heap entries for the key are stale.
        self._heap: list[tuple[float, int, K]] = []
        self._waiting: dict[K, tuple[float, int]] = {}
        self._seq = itertools.count()
        self._timer_task: asyncio.Task[None] | None = None
        self._timer_wakeup: asyncio.Event | None = None

        if metrics is not None:
            metrics.bind_in_flight(self.unfinished_work_seconds, self.longest_running_processor_seconds)

    # ------------------------------------------------------------------ basic

    def add(self, key: K) -> None:
        """Mark ``key`` as needing processing. Never blocks."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if self._metrics is not None:
            self._metrics.add()
        self._added_at.setdefault(key, self._clock())
        if key not in self._processing:
            self._queue.append(key)
            self._wake_one()
        self._report_depth()

    async def get(self) -> K | None:
        """Wait for the next key; ``None`` once shut down and nothing is queued.

        Every key returned must later be passed to ``done()``.
        """
        self._ensure_timer()
        loop = asyncio.get_running_loop()
        while not self._queue:
            if self._shutting_down:
                return None
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # If we were woken for a key but cancelled before taking it,
                # pass the wake-up on so that key is not left stranded.
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()
                else:
                    self._discard_waiter(waiter)
                raise
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        now = self._clock()
        added = self._added_at.pop(key, None)
        self._started_at[key] = now
        if self._metrics is not None and added is not None:
            self._metrics.observe_queue_duration(now - added)
        self._report_depth()
        return key

    def done(self, key: K) -> None:
        """Finish processing ``key``; re-queue it if it was added meanwhile."""
        if key not in self._processing:
            return
        self._processing.discard(key)
        started = self._started_at.pop(key, None)
        if self._metrics is not None and started is not None:
            self._metrics.observe_work_duration(self._clock() - started)
        if key in self._dirty:
            self._queue.append(key)
            self._wake_one()
        if not self._processing:
            for fut in self._drain_waiters:
                if not fut.done():
                    fut.set_result(None)
            self._drain_waiters.clear()

    def __len__(self) -> int:
        """Keys queued and ready to be handed out (informational only)."""
        return len(self._queue)

    # ---------------------------------------------------------------- delayed

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` once ``delay`` seconds have passed (``<= 0``: now).

        If ``key`` is already waiting, the earlier ready time is kept.
        """
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        # Choice: the retries metric counts every add_after that really delays
        # (delay > 0); immediate ones are plain adds and are not retries.
        if self._metrics is not None:
            self._metrics.retry()
        ready_at = self._clock() + delay
        current = self._waiting.get(key)
        if current is not None and current[0] <= ready_at:
            return
        seq = next(self._seq)
        self._waiting[key] = (ready_at, seq)
        heapq.heappush(self._heap, (ready_at, seq, key))
        self._ensure_timer()
        if self._timer_wakeup is not None:
            self._timer_wakeup.set()

    def add_rate_limited(self, key: K) -> None:
        """Add ``key`` after the delay the rate limiter chooses (records a failure)."""
        if self._shutting_down:
            return
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: K) -> None:
        """Clear the rate limiter's failure history for ``key`` (queue untouched)."""
        self._limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self._limiter.num_requeues(key)

    def add_ready(self) -> int:
        """Move every delayed key whose ready time has come into the queue.

        The background task calls this; it is public so callers driving a fake
        clock can flush due keys deterministically. Returns how many keys were
        added.
        """
        now = self._clock()
        moved = 0
        while self._heap and self._heap[0][0] <= now:
            ready_at, seq, key = heapq.heappop(self._heap)
            if self._waiting.get(key) != (ready_at, seq):
                continue  # superseded by an earlier ready time
            del self._waiting[key]
            self.add(key)
            moved += 1
        return moved

    def waiting_count(self) -> int:
        """Number of keys waiting for a delayed add."""
        return len(self._waiting)

    def _ensure_timer(self) -> None:
        if self._shutting_down:
            return
        if self._timer_task is not None and not self._timer_task.done():
            return
        if not self._heap:
            return  # started on the first add_after made from a running loop
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet; started on the next use from a loop
        self._timer_wakeup = asyncio.Event()
        # a timer that dies is logged and restarted: delayed keys must not strand
        self._timer_task = supervise(f"workqueue-{self.name}-delay", self._run_timer)

    async def _run_timer(self) -> None:
        assert self._timer_wakeup is not None
        wakeup = self._timer_wakeup
        while not self._shutting_down:
            self.add_ready()
            if self._heap:
                sleep = min(max(0.0, self._heap[0][0] - self._clock()), _MAX_TIMER_SLEEP)
            else:
                sleep = _MAX_TIMER_SLEEP
            wakeup.clear()
            try:
                await asyncio.wait_for(wakeup.wait(), timeout=sleep)
            except TimeoutError:
                pass

    # --------------------------------------------------------------- shutdown

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def shutdown(self) -> None:
        """Stop accepting keys; queued keys are still handed out, then ``None``."""
        if self._shutting_down:
            return
        self._shutting_down = True
        self._heap.clear()
        self._waiting.clear()
        if self._timer_task is not None and not self._timer_task.done():
            self._timer_task.cancel()
        self._timer_task = None
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    async def shutdown_with_drain(self) -> None:
        """``shutdown()`` and then wait until every handed-out key is done."""
        self.shutdown()
        loop = asyncio.get_running_loop()
        while self._processing:
            fut: asyncio.Future[None] = loop.create_future()
            self._drain_waiters.append(fut)
            await fut

    # ---------------------------------------------------------------- metrics

    def unfinished_work_seconds(self) -> float:
        """Sum of the ages of all keys currently processing."""
        now = self._clock()
        return sum(max(0.0, now - t) for t in self._start_times())

    def longest_running_processor_seconds(self) -> float:
        """Age of the oldest key currently processing (0 if none)."""
        starts = self._start_times()
        if not starts:
            return 0.0
        return max(0.0, self._clock() - min(starts))

    def _start_times(self) -> list[float]:
        # Normally read on the loop thread; if a scrape happens on another
        # thread the dict may change while being copied, so retry briefly.
        for _ in range(10):
            try:
                return list(self._started_at.values())
            except RuntimeError:
                continue
        return []

    def _report_depth(self) -> None:
        # Depth counts every dirty key: queued ones plus those that will be
        # queued again when their current processing finishes.
        if self._metrics is not None:
            self._metrics.set_depth(len(self._dirty))

    # ---------------------------------------------------------------- helpers

    def _wake_one(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _discard_waiter(self, waiter: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
