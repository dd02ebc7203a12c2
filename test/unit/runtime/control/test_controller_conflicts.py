"""A reconcile that keeps hitting 409 Conflict backs off exponentially to the
rate limiter's cap, as any other error does (it used to be retried after a
fixed 50 ms for ever: a stale cache became a hot loop)."""

from __future__ import annotations

from kaiwo_ctrl.runtime.api.apitypes import ApiError
from kaiwo_ctrl.runtime.control.controller import Controller
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.control.ratelimit import ItemExponentialFailureRateLimiter


async def test_conflicts_back_off_exponentially_and_are_capped():
    async def conflicting(_req):
        raise ApiError(409, {"reason": "Conflict", "message": "the object has been modified"}, "PUT", "/x")

    ctl = Controller("c", conflicting, rate_limiter=ItemExponentialFailureRateLimiter(base=0.005, cap=2.0))
    ctl.queue._clock = lambda: 100.0  # a still clock: the delay is exactly what the rate limiter chose
    req = Request("ns", "n")
    delays = []
    for _ in range(12):
        assert await ctl._reconcile_one(req) == "error"
        delays.append(round(ctl.queue._waiting[req][0] - 100.0, 6))
        ctl.queue._waiting.clear()
        ctl.queue._heap.clear()
    assert ctl.queue.num_requeues(req) == 12
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 2.0 and all(a <= b for a, b in zip(delays, delays[1:]))
    ctl.queue.shutdown()
