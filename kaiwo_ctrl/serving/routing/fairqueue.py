"""Fair queuing of one Model's requests across tenants while the Model is saturated (issue #41).

Pure code: no clock, no event loop, no I/O; the caller passes monotonic ``now``.

One bounded FIFO per tenant (the caller's reviewed namespace, see :mod:`.auth`;
never a request header, so a tenant cannot claim another's share). Release
order is smooth weighted round-robin across the tenants that have requests
waiting: each release adds every waiting tenant's weight to its credit, takes
the tenant with the most credit (the first to have queued on a tie) and takes
the total weight off it. Over any window a tenant gets ``weight / sum of
weights`` of the releases, interleaved rather than in bursts. A tenant whose
queue empties loses its credit: no tenant banks an idle period to flood later.
Work-conserving: a tenant alone is released every time.

Bounds (each answered 429 with ``Retry-After`` by the caller, never a silent
drop): ``max_len`` requests waiting per tenant, ``max_tenants`` tenants
waiting per Model, ``max_wait`` seconds in a queue (an expired ticket is taken
out at the next release or :meth:`FairQueue.expire`).
Weights come from a callable (see :mod:`.weights`); a weight outside
``1..MAX_WEIGHT`` counts as 1.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_WEIGHT = 100


class QueueFull(Exception):
    """The tenant's queue (or the Model's tenant count) is at its bound: answer 429 with ``retry_after`` seconds."""

    def __init__(self, reason: str, retry_after: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


@dataclass(eq=False, slots=True)
class Ticket:
    """One waiting request. ``state``: ``waiting``, ``released``, ``expired`` or ``cancelled``."""

    tenant: str
    enqueued: float
    payload: Any = None
    state: str = "waiting"


@dataclass(slots=True)
class _Tenant:
    queue: deque[Ticket] = field(default_factory=deque)
    credit: int = 0


def clamp_weight(w: object) -> int:
    """A usable weight: an int in ``1..MAX_WEIGHT``, else 1 (bad values never starve or flood)."""
    if isinstance(w, bool) or not isinstance(w, int) or w < 1 or w > MAX_WEIGHT:
        return 1
    return w


class FairQueue:
    """The waiting requests of one Model, one queue per tenant."""

    def __init__(
        self, max_len: int, max_wait: float, max_tenants: int = 256, weight: Callable[[str], int] | None = None,
    ) -> None:
        self.max_len = max_len
        self.max_wait = max_wait
        self.max_tenants = max_tenants
        self._weight = weight or (lambda _t: 1)
        self._tenants: dict[str, _Tenant] = {}  # only tenants with requests waiting, in the order they queued

    def __len__(self) -> int:
        return sum(len(t.queue) for t in self._tenants.values())

    def waiting(self, tenant: str) -> int:
        t = self._tenants.get(tenant)
        return len(t.queue) if t else 0

    def tenants(self) -> list[str]:
        return list(self._tenants)

    def retry_after(self) -> int:
        """Seconds a refused client should wait: the queue's wait bound, at least 1."""
        return max(1, math.ceil(self.max_wait))

    def enqueue(self, tenant: str, now: float, payload: Any = None) -> Ticket:
        """Queue a request of ``tenant``; QueueFull past the bounds (the ticket is not queued)."""
        t = self._tenants.get(tenant)
        if t is None:
            if len(self._tenants) >= self.max_tenants:
                raise QueueFull("too many tenants waiting for this Model", self.retry_after())
            t = self._tenants[tenant] = _Tenant()
        if len(t.queue) >= self.max_len:
            raise QueueFull("this tenant's queue for the Model is full", self.retry_after())
        ticket = Ticket(tenant, now, payload)
        t.queue.append(ticket)
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Take a waiting ticket out (its client went away, or its deadline passed)."""
        if ticket.state != "waiting":
            return
        ticket.state = "cancelled"
        t = self._tenants.get(ticket.tenant)
        if t is not None:
            try:
                t.queue.remove(ticket)
            except ValueError:
                pass
            if not t.queue:
                del self._tenants[ticket.tenant]

    def expire(self, now: float) -> list[Ticket]:
        """Take out and return the tickets that waited longer than ``max_wait`` (each queue is FIFO: only heads)."""
        out: list[Ticket] = []
        for name in list(self._tenants):
            t = self._tenants[name]
            while t.queue and now - t.queue[0].enqueued > self.max_wait:
                ticket = t.queue.popleft()
                ticket.state = "expired"
                out.append(ticket)
            if not t.queue:
                del self._tenants[name]
        return out

    def release(self, eligible: Callable[[str], bool] | None = None) -> Ticket | None:
        """The next ticket in fair order (marked released), or None when nothing waits. With ``eligible``, only
        the tenants it accepts compete (and gain credit) in this round; None when it accepts none."""
        tenants = [(n, t) for n, t in self._tenants.items() if eligible is None or eligible(n)]
        if not tenants:
            return None
        total = 0
        best_name = ""
        best: _Tenant | None = None
        for name, t in tenants:
            w = clamp_weight(self._weight(name))
            t.credit += w
            total += w
            if best is None or t.credit > best.credit:
                best_name, best = name, t
        assert best is not None
        best.credit -= total
        ticket = best.queue.popleft()
        ticket.state = "released"
        if not best.queue:
            del self._tenants[best_name]  # its credit goes with it: no banking while idle
        return ticket
