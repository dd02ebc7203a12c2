"""Fair queuing (issue #41): the scheduler's release order for tables of queues and weights, its bounds, and the
saturation predicate that turns it on."""

from __future__ import annotations

import argparse

import pytest

from kaiwo_ctrl.serving.command import add_proxy_arguments, proxy_limits
from kaiwo_ctrl.serving.routing.balance import Endpoint
from kaiwo_ctrl.serving.routing.fairgate import tenant_of
from kaiwo_ctrl.serving.routing.fairqueue import MAX_WEIGHT, FairQueue, QueueFull, clamp_weight
from kaiwo_ctrl.serving.limits import FairLimits
from kaiwo_ctrl.serving.routing.saturation import saturated, without_room
from kaiwo_ctrl.serving.routing.score import EngineSample


def order(arrivals: str, weights: dict[str, int] | None = None, n: int | None = None) -> str:
    """Queue one request per letter of ``arrivals`` (the letter is the tenant), release ``n`` (all): their tenants."""
    w = weights or {}
    q = FairQueue(max_len=100, max_wait=60, weight=lambda t: w.get(t, 1))
    for i, tenant in enumerate(arrivals):
        q.enqueue(tenant, float(i), payload=i)
    out = []
    for _ in range(len(arrivals) if n is None else n):
        t = q.release()
        assert t is not None and t.state == "released"
        out.append(t.tenant)
    return "".join(out)


@pytest.mark.parametrize("arrivals, weights, expected", [
    # a tenant alone gets everything, in its own order
    ("AAAA", None, "AAAA"),
    # equal weights: round-robin, whoever queued first goes first
    ("AAAAAAB", None, "ABAAAAA"),
    ("AAAABBBB", None, "ABABABAB"),
    ("BAAAA", None, "BAAAA"),
    ("AAABBBCCC", None, "ABCABCABC"),
    # weights: A twice B, interleaved (not in bursts)
    ("AAAAAABBB", {"A": 2}, "ABAABAABA"),
    # weight 3 vs 1
    ("AAAAAABB", {"A": 3}, "AABAAABA"),
    # work-conserving: once B's queue is empty, A gets every release
    ("AAAAAB", {"B": 5}, "BAAAAA"),
    # a bad weight counts as 1
    ("AAAABBBB", {"A": 0, "B": MAX_WEIGHT + 1}, "ABABABAB"),
])
def test_release_order(arrivals: str, weights: dict[str, int] | None, expected: str) -> None:
    assert order(arrivals, weights) == expected


def test_fifo_within_a_tenant_and_payload_kept() -> None:
    q = FairQueue(max_len=10, max_wait=60)
    for i in range(3):
        q.enqueue("A", float(i), payload=i)
    assert [q.release().payload for _ in range(3)] == [0, 1, 2]  # type: ignore[union-attr]
    assert q.release() is None


def test_no_banking_while_idle() -> None:
    """A tenant whose queue emptied starts again with no credit: it does not get a burst for having been idle."""
    q = FairQueue(max_len=100, max_wait=60)
    for i in range(4):
        q.enqueue("A", float(i))
    q.enqueue("B", 0.0)
    assert "".join(q.release().tenant for _ in range(5)) == "ABAAA"  # type: ignore[union-attr]
    for i in range(4):
        q.enqueue("B", 10.0 + i)
        q.enqueue("A", 10.0 + i)
    assert "".join(q.release().tenant for _ in range(8)) == "BABABABA"  # type: ignore[union-attr]


def test_full_tenant_queue_gives_429_to_that_tenant_only() -> None:
    q = FairQueue(max_len=2, max_wait=7.5)
    q.enqueue("A", 0.0)
    q.enqueue("A", 0.0)
    with pytest.raises(QueueFull) as e:
        q.enqueue("A", 0.0)
    assert e.value.retry_after == 8
    assert q.waiting("A") == 2
    q.enqueue("B", 0.0)  # the other tenant's queue is its own
    assert q.waiting("B") == 1


def test_tenant_count_bound() -> None:
    q = FairQueue(max_len=5, max_wait=1, max_tenants=2)
    q.enqueue("A", 0.0)
    q.enqueue("B", 0.0)
    with pytest.raises(QueueFull):
        q.enqueue("C", 0.0)
    q.enqueue("A", 0.0)  # a tenant already waiting may still queue
    assert q.release().tenant == "A"  # type: ignore[union-attr]
    assert q.release().tenant == "B"  # type: ignore[union-attr]
    q.enqueue("C", 0.0)  # B left: room for another tenant


def test_wait_bound_expires_oldest_first() -> None:
    q = FairQueue(max_len=10, max_wait=5)
    old = q.enqueue("A", 0.0)
    new = q.enqueue("A", 4.0)
    b = q.enqueue("B", 1.0)
    expired = q.expire(6.5)
    assert expired == [old, b] and old.state == b.state == "expired"
    assert q.tenants() == ["A"] and new.state == "waiting"
    assert q.release() is new


def test_cancel_takes_the_ticket_out() -> None:
    q = FairQueue(max_len=10, max_wait=5)
    a = q.enqueue("A", 0.0)
    b = q.enqueue("B", 0.0)
    q.cancel(a)
    assert a.state == "cancelled" and q.tenants() == ["B"]
    q.cancel(a)  # twice: no effect
    assert q.release() is b and len(q) == 0


@pytest.mark.parametrize("value, expected", [(1, 1), (7, 7), (MAX_WEIGHT, MAX_WEIGHT), (0, 1), (-3, 1),
                                             (MAX_WEIGHT + 1, 1), (True, 1), ("5", 1), (2.5, 1), (None, 1)])
def test_clamp_weight(value: object, expected: int) -> None:
    assert clamp_weight(value) == expected


NOW = 100.0
S = EngineSample


def ep(*, sample: EngineSample | None = None, fresh: bool = True, pending: int = 0, in_flight: int = 0, base: int = 0) -> Endpoint:
    e = Endpoint("ns/p", "10.0.0.1:8000", frozenset(), in_flight, pending=pending)
    e.engine, e.engine_until, e.in_flight_base = sample, (NOW + 3 if fresh else NOW - 1), base
    return e


@pytest.mark.parametrize("endpoints, expected", [
    ([], False),  # no endpoint: not the fair queue's business
    # engines that report: room while nothing waits, KV not full and few of our requests without a first token
    ([ep(sample=S(running=4))], False),
    ([ep(sample=S(running=4, waiting=1))], True),
    ([ep(sample=S(running=4, kv=0.95))], True),
    ([ep(sample=S(running=4), pending=2)], True),
    ([ep(sample=S(running=4), pending=1)], False),
    # an admitting engine: sends since the report (less what finished) up to its KV headroom at the running
    # requests' mean use -- 4 running at 0.45 use 0.1125 each, (0.9 - 0.45) / 0.1125 = 4 more -- at least max_pending
    ([ep(sample=S(running=4, kv=0.45), in_flight=7, base=4)], False),
    ([ep(sample=S(running=4, kv=0.45), in_flight=8, base=4)], True),
    ([ep(sample=S(running=4, kv=0.85), in_flight=5, base=4)], False),  # headroom under max_pending: max_pending
    ([ep(sample=S(running=4, kv=0.85), in_flight=6, base=4)], True),
    ([ep(sample=S(running=4, kv=0.85), in_flight=5, base=6)], False),  # what finished since makes room again
    # ... our share of it: another replica sent half the engine's requests (4 of 8 running are ours)
    ([ep(sample=S(running=8, kv=0.45), in_flight=8, base=4)], True),
    ([ep(sample=S(running=8, kv=0.45), in_flight=7, base=4)], False),
    # a full engine (waiting, or KV full): room only once more finished than we sent, beyond our share of its
    # queue (4 waiting, 4 of 8 requests ours: 2)
    ([ep(sample=S(running=4, waiting=4), in_flight=2, base=4)], True),
    ([ep(sample=S(running=4, waiting=4), in_flight=1, base=4)], False),
    ([ep(sample=S(running=4, kv=0.95), in_flight=4, base=4)], True),
    ([ep(sample=S(running=4, kv=0.95), in_flight=3, base=4)], False),
    ([ep(sample=S(running=4, kv=0.95), in_flight=0, base=0)], True),  # none of ours there: nothing of ours to replace
    # saturated only when every endpoint is: one with room takes the request (work-conserving)
    ([ep(sample=S(waiting=3)), ep(sample=S(running=1))], False),
    ([ep(sample=S(waiting=3)), ep(sample=S(waiting=1))], True),
    # no (fresh) report: every endpoint at the in-flight cap
    ([ep(in_flight=4)], True),
    ([ep(in_flight=3)], False),
    ([ep(sample=S(waiting=9), fresh=False, in_flight=1)], False),  # a stale report is not used
    ([ep(in_flight=4), ep(sample=S(waiting=1))], True),
    ([ep(in_flight=4), ep(sample=S(running=1))], False),
])
def test_saturated(endpoints: list[Endpoint], expected: bool) -> None:
    assert saturated(endpoints, NOW, max_pending=2, in_flight_cap=4) is expected


def test_without_room_names_the_full_endpoints() -> None:
    """While the Model has room somewhere, the pick passes over the endpoints without room."""
    a, b = ep(sample=S(running=4, waiting=2)), ep(sample=S(running=1))
    a.key, b.key = "ns/a", "ns/b"
    assert without_room([a, b], NOW, max_pending=2, in_flight_cap=0) == frozenset({"ns/a"})
    assert without_room([b], NOW, max_pending=2, in_flight_cap=0) == frozenset()
    assert without_room([a], NOW, max_pending=2, in_flight_cap=0) is None


def test_no_cap_without_reports_never_saturates() -> None:
    assert saturated([ep(in_flight=1000)], NOW, max_pending=2, in_flight_cap=0) is False


@pytest.mark.parametrize("user, address, expected", [
    ("system:serviceaccount:team-a:runner", "127.0.0.9", "team-a"),  # a ServiceAccount: its namespace
    ("alice@example.com", "127.0.0.9", "alice@example.com"),  # a user token: the user
    (None, "127.0.0.2", "127.0.0.2"),  # --proxy-auth none: the address the server recorded
    (None, ("namespace", "team-b"), "team-b"),  # the Gateway listener: the route's namespace
    (None, None, ""),
])
def test_tenant_of(user: str | None, address: object, expected: str) -> None:
    assert tenant_of(user, address) == expected  # type: ignore[arg-type]


def test_fair_flags() -> None:
    p = argparse.ArgumentParser(exit_on_error=False)
    add_proxy_arguments(p)
    assert proxy_limits(p.parse_args([])).fair == FairLimits()
    lim = proxy_limits(p.parse_args(["--proxy-fair-queuing", "on", "--proxy-fair-queue-length", "5", "--proxy-fair-queue-wait", "2s",
                                     "--proxy-fair-max-pending", "3", "--proxy-fair-in-flight-cap", "7",
                                     "--proxy-fair-event-interval", "30s", "--proxy-fair-reserve", "0",
                                     "--proxy-fair-prefill-yield", "off"])).fair
    assert lim == FairLimits(enabled=True, max_queue=5, max_wait=2.0, max_pending=3, in_flight_cap=7, event_interval=30.0,
                             reserve=0, prefill_yield=False)
    assert proxy_limits(p.parse_args(["--proxy-fair-reserve", "6"])).fair.reserve == 6
    with pytest.raises(argparse.ArgumentError):
        p.parse_args(["--proxy-fair-reserve", "-1"])


def test_room_counts_the_tenants_own_requests_without_a_first_token() -> None:
    """Each tenant has its own prefill lane per engine: the flood's request in prefill leaves room for another's."""
    e = ep(sample=S(running=4, kv=0.2), pending=1, in_flight=5, base=4)
    e.pending_by = {"A": 1}
    assert saturated([e], NOW, max_pending=1, in_flight_cap=0)  # no tenant named: every request counts
    assert without_room([e], NOW, 1, 0, "A") is None
    assert without_room([e], NOW, 1, 0, "B") == frozenset()
    full = ep(sample=S(running=4, waiting=1), pending=0, in_flight=4, base=4)
    assert without_room([full], NOW, 1, 0, "B") is None, "the engine-wide rules still hold for every tenant"


def test_release_among_eligible_tenants() -> None:
    q = FairQueue(max_len=10, max_wait=60)
    for i in range(3):
        q.enqueue("A", float(i))
    q.enqueue("B", 5.0)
    assert q.release(lambda t: t == "nobody") is None and len(q) == 4, "no eligible tenant: nothing released"
    assert q.release(lambda t: t == "A").tenant == "A"  # type: ignore[union-attr]
    assert q.release(lambda t: t == "A").tenant == "A"  # type: ignore[union-attr]
    # B gained no credit while it could not be served, and A none over it: plain round-robin from here
    assert [q.release().tenant for _ in range(2)] == ["A", "B"]  # type: ignore[union-attr]
