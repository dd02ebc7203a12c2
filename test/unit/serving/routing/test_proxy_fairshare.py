"""Fair share (issue #41): who is over its share of a saturated Model, and the room it leaves to the others."""

from __future__ import annotations

import time

import pytest

from kaiwo_ctrl.serving.routing.balance import Endpoint
from kaiwo_ctrl.serving.routing.endpoints import Group
from kaiwo_ctrl.serving.routing.fairshare import ACTIVE_FOR, MAX_IDLE, NO_SHARE, Share, TenantLoad, quiet_count
from kaiwo_ctrl.serving.routing.saturation import has_room
from kaiwo_ctrl.serving.routing.score import EngineSample as S

NOW = 100.0


def ep(sample: S | None, in_flight: int = 0, base: int = 0, pending_by: dict[str, int] | None = None) -> Endpoint:
    e = Endpoint("ns/p", "10.0.0.1:8000", frozenset(), in_flight, pending=sum((pending_by or {}).values()))
    e.engine, e.engine_until, e.in_flight_base = sample, NOW + 3, base
    e.pending_by = dict(pending_by or {})
    return e


def load_of(in_flight: dict[str, int], weights: dict[str, int] | None = None, now: float = NOW) -> TenantLoad:
    load = TenantLoad()
    w = weights or {}
    for t, n in in_flight.items():
        load.touch(t, now, lambda t: w.get(t, 1))
        for _ in range(n):
            load.started(t)
    return load


def test_tenant_load_counts_in_flight_and_keeps_a_tenant_active_for_a_while() -> None:
    load = load_of({"A": 2, "B": 1})
    assert (load.in_flight, load.total, load.wsum) == ({"A": 2, "B": 1}, 3, 2)
    load.ended("B", NOW)
    load.expire(NOW + ACTIVE_FOR)
    assert set(load.weights) == {"A", "B"} and load.total == 2, "between two turns B still counts"
    load.expire(NOW + ACTIVE_FOR + 0.1)
    assert set(load.weights) == {"A"} and load.wsum == 1, "then it is forgotten"
    load.touch("C", NOW + 20, lambda t: 3)
    assert load.weights == {"A": 1, "C": 3} and load.wsum == 4, "a tenant with requests waiting is active"
    load.ended("A", NOW)
    load.ended("A", NOW)
    load.ended("A", NOW)  # one more than it had: ignored
    assert load.in_flight == {} and load.total == 0


def test_tenant_load_forgets_the_oldest_idle_tenants_past_its_bound() -> None:
    load = TenantLoad()
    for i in range(MAX_IDLE + 10):
        load.started(f"t{i}")
        load.ended(f"t{i}", NOW)
    assert len(load.idle_since) == MAX_IDLE == len(load.weights) == load.wsum
    assert "t0" not in load.weights and f"t{MAX_IDLE + 9}" in load.weights


def under_of(share: Share, tenants: str) -> str:
    return "".join(t for t in tenants if share.under is not None and share.under(t))


@pytest.mark.parametrize("tenant, in_flight, weights, over, under", [
    # a tenant alone is never over its share: it gets the whole Model
    ("A", {"A": 50}, {}, False, ""),
    # the flood holds 50 of 52: over its half; B (2 of 52) is under it and is yielded to
    ("A", {"A": 50, "B": 2}, {}, True, "B"),
    ("B", {"A": 50, "B": 2}, {}, False, ""),
    # a quiet tenant between turns (0 in flight) still counts
    ("A", {"A": 50, "B": 0}, {}, True, "B"),
    # exactly at its share is not over it
    ("A", {"A": 5, "B": 5}, {}, False, ""),
    # weights: A weighs 3, so 75 of 100 is its share, not over it; 80 of 100 is
    ("A", {"A": 75, "B": 25}, {"A": 3}, False, ""),
    ("A", {"A": 80, "B": 20}, {"A": 3}, True, "B"),
    # three tenants: A over, B under, C (40 of 100 with a third each) over too, so only B is yielded to
    ("A", {"A": 50, "B": 10, "C": 40}, {}, True, "B"),
    # nothing in flight: nobody is over
    ("A", {"A": 0, "B": 0}, {}, False, ""),
])
def test_share(tenant: str, in_flight: dict[str, int], weights: dict[str, int], over: bool, under: str) -> None:
    share = load_of(in_flight, weights).share(tenant, NOW, reserve=4)
    assert share.reserve == (4 if over else 0)
    assert under_of(share, "ABCX") == under
    assert load_of(in_flight, weights).share(tenant, NOW, reserve=4, prefill_yield=False).under is None


def test_share_after_a_quiet_tenant_went_idle() -> None:
    load = load_of({"A": 10, "B": 1})
    load.ended("B", NOW)
    assert load.share("A", NOW + 1, reserve=4).reserve == 4
    assert load.share("A", NOW + ACTIVE_FOR + 1, reserve=4) is NO_SHARE, "B idle too long: A is alone again"


ADMITTING = S(running=4, kv=0.45)  # KV headroom for 4 more at the running requests' mean use
FULL = S(running=4, kv=0.95)


@pytest.mark.parametrize("endpoint, share, expected", [
    # an admitting engine with headroom 4: 2 sent since the report leave 2, which a reserve of 2 keeps for others
    (ep(ADMITTING, in_flight=5, base=4), NO_SHARE, True),
    (ep(ADMITTING, in_flight=5, base=4), Share(2), True),
    (ep(ADMITTING, in_flight=6, base=4), NO_SHARE, True),
    (ep(ADMITTING, in_flight=6, base=4), Share(2), False),
    # a full engine: what finished since the report is room, beyond the reserve for a tenant over its share
    (ep(FULL, in_flight=3, base=4), NO_SHARE, True),
    (ep(FULL, in_flight=3, base=4), Share(2), False),
    (ep(FULL, in_flight=1, base=4), Share(2), True),
    # an engine that does not report: the in-flight cap (4) less the reserve
    (ep(None, in_flight=1), Share(2), True),
    (ep(None, in_flight=2), Share(2), False),
    (ep(None, in_flight=2), NO_SHARE, True),
    # yielding the prefill: B has a request without a first token here
    (ep(ADMITTING, in_flight=4, base=4, pending_by={"B": 1}), Share(0, lambda t: t == "B"), False),
    (ep(ADMITTING, in_flight=4, base=4, pending_by={"C": 1}), Share(0, lambda t: t == "B"), True),
    (ep(None, in_flight=1, pending_by={"B": 1}), Share(0, lambda t: t == "B"), False),
])
def test_room_left_by_a_tenant_over_its_share(endpoint: Endpoint, share: Share, expected: bool) -> None:
    assert has_room(endpoint, NOW, max_pending=1, in_flight_cap=4, tenant="A", share=share) is expected


# -------------------------------------------------------------- quiet engines
@pytest.mark.parametrize("in_flight, weights, fraction", [
    ({"A": 50}, {}, None),  # alone: nothing to keep quiet
    ({"A": 5, "B": 5}, {}, None),  # nobody over its share
    ({"A": 0, "B": 0}, {}, None),
    ({"A": 48, "B": 2}, {}, 0.04),  # A over: B holds 2 of 50
    ({"A": 50, "B": 0}, {}, 0.0),  # B between turns still has the quiet engines
    ({"A": 50, "B": 10, "C": 40}, {}, 0.1),  # C over too: only B's count
    ({"A": 75, "B": 25}, {"A": 3}, None),  # A's weight makes 75 of 100 its share
])
def test_quiet_fraction(in_flight: dict[str, int], weights: dict[str, int], fraction: float | None) -> None:
    assert load_of(in_flight, weights).quiet_fraction(NOW) == fraction


def test_quiet_fraction_follows_every_change() -> None:
    load = load_of({"A": 1, "B": 1})
    assert load.quiet_fraction(NOW) is None
    load.started("A")
    assert load.quiet_fraction(NOW) == pytest.approx(1 / 3), "A over its half: B holds 1 of 3"
    load.ended("A", NOW)
    assert load.quiet_fraction(NOW) is None, "1 and 1: nobody over"
    load.ended("B", NOW)
    assert load.quiet_fraction(NOW) == 0.0, "B between turns: A holds all"
    assert load.quiet_fraction(NOW + ACTIVE_FOR + 1) is None, "B forgotten: A alone"


@pytest.mark.parametrize("endpoints, fraction, count", [
    (1, 0.5, 0), (2, 0.0, 1), (4, 0.04, 1), (4, 0.25, 1), (4, 0.26, 2), (4, 0.9, 3), (10, 0.31, 4),
])
def test_quiet_count(endpoints: int, fraction: float, count: int) -> None:
    assert quiet_count(endpoints, fraction) == count


def test_share_names_the_quiet_engines_to_both_sides() -> None:
    load, quiet = load_of({"A": 48, "B": 2}), frozenset({"ns/p0"})
    a, b = load.share("A", NOW, reserve=4, quiet=quiet), load.share("B", NOW, reserve=4, quiet=quiet)
    assert (a.quiet, a.over, a.reserve) == (quiet, True, 4)
    assert (b.quiet, b.over, b.reserve, b.under) == (quiet, False, 0, None)
    assert load.share("B", NOW, reserve=4) is NO_SHARE
    assert load_of({"A": 48}).share("A", NOW, reserve=4, quiet=quiet) is NO_SHARE, "alone: no share at all"


QUIET = frozenset({"ns/p"})


@pytest.mark.parametrize("endpoint, tenant, share, expected", [
    # a quiet engine has no room for a tenant over its share, however empty it is
    (ep(ADMITTING, in_flight=4, base=4), "A", Share(0, None, QUIET, True), False),
    (ep(None), "A", Share(0, None, QUIET, True), False),
    (ep(ADMITTING, in_flight=4, base=4), "A", Share(0, None, frozenset({"ns/q"}), True), True),
    # a tenant under its share has no one-prompt lane there: its second prompt goes in too
    (ep(ADMITTING, in_flight=5, base=4, pending_by={"B": 1}), "B", Share(quiet=QUIET), True),
    (ep(ADMITTING, in_flight=5, base=4, pending_by={"B": 1}), "B", Share(quiet=frozenset({"ns/q"})), False),
    # ... but the engine's own report still rules: a full engine has room only for what finished
    (ep(FULL, in_flight=4, base=4, pending_by={"B": 1}), "B", Share(quiet=QUIET), False),
])
def test_room_on_a_quiet_engine(endpoint: Endpoint, tenant: str, share: Share, expected: bool) -> None:
    assert has_room(endpoint, NOW, max_pending=1, in_flight_cap=4, tenant=tenant, share=share) is expected


def reporting_group(names: list[str]) -> Group:
    g = Group()
    for i, name in enumerate(names):
        g.upsert(Endpoint(f"ns/{name}", f"10.0.0.{i}:8000"))
    for e in g.endpoints.values():
        e.engine, e.engine_until = S(running=4, kv=0.3), time.monotonic() + 60
    return g


def test_every_replica_picks_the_same_quiet_engines() -> None:
    one, other = reporting_group(["p2", "p0", "p3", "p1"]), reporting_group(["p1", "p3", "p0", "p2"])
    now = time.monotonic()
    for g in (one, other):
        assert g.quiet(now) == frozenset(), "one tenant: nothing is quiet"
        g.tenants.touch("B", now)
        g.tenants.touch("A", now)
        for _ in range(9):
            g.tenants.started("A")
        g.tenants.started("B")
    assert one.quiet(now) == other.quiet(now) == {"ns/p0"}, "B holds 1 of 10 of 4 engines: one, the first by key"
    for _ in range(3):
        one.tenants.started("B")
    assert one.quiet(now) == {"ns/p0", "ns/p1"}, "4 of 13: two"
    one.remove("ns/p0")
    assert one.quiet(now) == {"ns/p1"}, "the endpoints changed: 4 of 13 of 3 engines is one, the first of the rest"


def test_a_quiet_tenants_new_conversation_goes_to_a_quiet_engine_and_its_next_turn_follows() -> None:
    g = reporting_group(["p0", "p1", "p2", "p3"])
    quiet = frozenset({"ns/p0", "ns/p1"})
    g.endpoints["ns/p0"].engine = S(running=30, kv=0.6)
    key = next(k for k in (f"conv-{i}" for i in range(100)) if g.choose_prefix(k, 64, 125, "", frozenset()).endpoint.key
               not in quiet)  # a key whose ring home is not quiet
    g.recent.clear()
    c = g.choose_prefix(key, 64, 125, "", frozenset(), prefer=quiet)
    assert c.endpoint.key == "ns/p1", "the least loaded quiet engine"
    assert g.choose_prefix(key, 64, 125, "", frozenset(), prefer=quiet).endpoint.key == "ns/p1", "its next turn follows"
    assert g.choose_prefix(key, 64, 125, "", frozenset()).endpoint.key == "ns/p1", "... quiet or not: its cache is there"
    g.recent.clear()
    c = g.choose_prefix(key, 64, 125, "", frozenset({"ns/p1"}), prefer=quiet)
    assert c.endpoint.key == "ns/p0", "p1 has no room: the other quiet one"
    g.recent.clear()
    assert g.choose_prefix(key, 64, 125, "", quiet, prefer=quiet).endpoint.key not in quiet, "none has room: as usual"
