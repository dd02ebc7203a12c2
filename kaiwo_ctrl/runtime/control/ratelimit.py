"""Rate limiters deciding how long a key waits before it is retried.

Every limiter answers three questions about a key:

* ``when(key)`` -- how many seconds the next retry of ``key`` should wait.
  Calling it *records a failure* (per-key limiters bump their counter, the
  token bucket consumes a token), so call it exactly once per retry.
* ``forget(key)`` -- drop whatever history the limiter keeps for ``key``
  (called after a successful reconcile so the next failure starts over).
* ``num_requeues(key)`` -- how many failures are on record for ``key``.

The limiters compose: ``MaxOfRateLimiter`` takes the largest delay of its
children, ``WithMaxWaitRateLimiter`` clamps a child's delay. The controller
default is the per-key exponential backoff (5 ms doubling up to 1000 s)
combined with one shared token bucket (10 per second, burst 100) that only
bites when very many keys fail at once.

Limiters are plain objects used from a single event loop; they never sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Protocol

__all__ = [
    "RateLimiter",
    "ItemExponentialFailureRateLimiter",
    "BucketRateLimiter",
    "MaxOfRateLimiter",
    "ItemFastSlowRateLimiter",
    "WithMaxWaitRateLimiter",
    "default_controller_rate_limiter",
]


class RateLimiter(Protocol):
    """What the workqueue needs from a rate limiter."""

    def when(self, item: Hashable) -> float: ...

    def forget(self, item: Hashable) -> None: ...

    def num_requeues(self, item: Hashable) -> int: ...


class ItemExponentialFailureRateLimiter:
    """Per-key exponential backoff: ``base * 2**n`` seconds, capped at ``cap``.

    ``n`` is the number of failures recorded for the key *before* this call,
    so with the defaults the delays are 0.005, 0.01, 0.02, ... 655.36 and from
    the 19th failure on the cap of 1000 s.
    """

    # Past this many doublings the product is above any sane cap; short-cut
    # to the cap instead of computing a float that may overflow.
    _MAX_EXPONENT = 1000

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        if base < 0 or cap < 0:
            raise ValueError("base and cap must be non-negative")
        self.base = float(base)
        self.cap = float(cap)
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        n = self._failures.get(item, 0)
        self._failures[item] = n + 1
        if n >= self._MAX_EXPONENT:
            return self.cap
        return min(self.base * (2.0**n), self.cap)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """One token bucket shared by every key.

    The bucket holds at most ``burst`` tokens, starts full and refills at
    ``qps`` tokens per second. Each ``when()`` takes a token *now* (the level
    may go negative, which is a reservation of a future token) and returns how
    long until that token exists. The reservation is kept even if the caller
    ends up waiting longer for another reason. Keys are not tracked:
    ``forget`` does nothing and ``num_requeues`` is always 0.
    """

    def __init__(
        self,
        qps: float = 10.0,
        burst: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if qps <= 0:
            raise ValueError("qps must be positive")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self, item: Hashable) -> float:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = max(self._last, now)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps

    def forget(self, item: Hashable) -> None:
        return None

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """Combines limiters: the longest delay wins.

    Every child's ``when`` is called (so each records the failure / consumes
    its token); ``forget`` is passed to all children; ``num_requeues`` is the
    largest count any child reports.
    """

    def __init__(self, *children: RateLimiter) -> None:
        if not children:
            raise ValueError("MaxOfRateLimiter needs at least one child")
        self.children: tuple[RateLimiter, ...] = children

    def when(self, item: Hashable) -> float:
        return max(child.when(item) for child in self.children)

    def forget(self, item: Hashable) -> None:
        for child in self.children:
            child.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(child.num_requeues(item) for child in self.children)


class ItemFastSlowRateLimiter:
    """``fast`` seconds for the first ``max_fast_attempts`` failures, then ``slow``."""

    def __init__(self, fast: float, slow: float, max_fast_attempts: int) -> None:
        if fast < 0 or slow < 0 or max_fast_attempts < 0:
            raise ValueError("fast, slow and max_fast_attempts must be non-negative")
        self.fast = float(fast)
        self.slow = float(slow)
        self.max_fast_attempts = int(max_fast_attempts)
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        n = self._failures.get(item, 0) + 1
        self._failures[item] = n
        return self.fast if n <= self.max_fast_attempts else self.slow

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class WithMaxWaitRateLimiter:
    """Delegates to ``child`` but never returns more than ``max_wait`` seconds."""

    def __init__(self, child: RateLimiter, max_wait: float) -> None:
        if max_wait < 0:
            raise ValueError("max_wait must be non-negative")
        self.child = child
        self.max_wait = float(max_wait)

    def when(self, item: Hashable) -> float:
        return min(self.child.when(item), self.max_wait)

    def forget(self, item: Hashable) -> None:
        self.child.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return self.child.num_requeues(item)


def default_controller_rate_limiter(
    bucket: bool = True, clock: Callable[[], float] = time.monotonic
) -> RateLimiter:
    """The controller default: exponential 5 ms..1000 s per key, plus (unless
    ``bucket=False``) a shared 10 qps / burst 100 token bucket."""
    per_item = ItemExponentialFailureRateLimiter(base=0.005, cap=1000.0)
    if not bucket:
        return per_item
    return MaxOfRateLimiter(per_item, BucketRateLimiter(qps=10.0, burst=100, clock=clock))
