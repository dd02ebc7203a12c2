"""runtime/control/expectations.py: read-your-writes, bounded, pruned, never leaking."""

from kaiwo_ctrl.runtime.control.expectations import Expectations


def obj(rv, name="a", status=None, **meta):
    o = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, **meta}}
    if status is not None:
        o["status"] = status
    return o


K = ("Job", "ns", "a")


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_view_answers_the_write_until_the_cache_moves():
    e = Expectations()
    e.wrote(K, "1", obj("2"))
    assert e.view(K, obj("1"))["metadata"]["resourceVersion"] == "2"
    assert e.view(K, obj("2"))["metadata"]["resourceVersion"] == "2"
    assert len(e) == 0  # dropped once the cache moved on
    e.wrote(K, None, obj("5"))  # a create: the cache has nothing yet
    assert e.view(K, None)["metadata"]["resourceVersion"] == "5"


def test_bounded_by_count_and_bytes_and_ttl():
    clock = Clock()
    e = Expectations(max_entries=3, max_bytes=10_000, ttl=5, clock=clock)
    for i in range(10):
        e.wrote(("Job", "ns", str(i)), None, obj("1", name=str(i)))
    assert len(e) == 3
    e = Expectations(max_entries=100, max_bytes=2_000, clock=clock)
    for i in range(50):
        e.wrote(("Job", "ns", str(i)), None, obj("1", name=str(i), labels={"x": "y" * 100}))
    assert e.nbytes <= 2_000 and 0 < len(e) < 50
    e = Expectations(ttl=5, clock=clock)
    e.wrote(K, "1", obj("2"))
    clock.t = 6
    assert e.view(K, obj("1"))["metadata"]["resourceVersion"] == "1"  # the event never came: expired
    assert len(e) == 0


def test_pruned_on_delete_event():
    e = Expectations()
    e.wrote(K, "1", obj("2"))
    e.expect_status(K, "1", {"status": "RUNNING"})
    e.pruner("Job").on_delete(obj("3"), False)
    assert len(e) == 0 and e.nbytes == 0


def test_own_status_echo_is_recognised_once():
    e = Expectations()
    e.expect_status(K, "1", {"status": "RUNNING"})
    assert e.own_status_event(K, obj("1", generation=1), obj("2", status={"status": "RUNNING"}, generation=1))
    assert not e.own_status_event(K, obj("1"), obj("2", status={"status": "RUNNING"}))  # consumed
    e.expect_status(K, "1", {"status": "RUNNING"})
    # someone else also changed the spec: not only our echo
    assert not e.own_status_event(K, obj("1", generation=1), obj("2", status={"status": "RUNNING"}, generation=2))


def test_echo_filter_drops_only_our_own_status_echo():
    e = Expectations()
    echo = e.echo_filter("Job")
    e.expect_status(K, "1", {"status": "RUNNING"})
    assert not echo.update(obj("1", generation=1), obj("2", status={"status": "RUNNING"}, generation=1))
    # the next update of the same object is someone else's: it passes
    assert echo.update(obj("2", generation=1), obj("3", status={"status": "FAILED"}, generation=1))
    # another kind's echo is not this filter's business
    e.expect_status(("Model", "ns", "a"), "1", {"state": "Ready"})
    assert echo.update(obj("1"), obj("2", status={"state": "Ready"}))
    assert echo.create(obj("1")) and echo.delete(obj("1"))


M = ("Model", "ns", "m")


def pod(name, deleting=False):
    return obj("1", name=name, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}))


def test_created_children_are_pending_until_the_cache_lists_them():
    e = Expectations()
    assert e.children_seen(M, [])  # nothing recorded
    e.expect_children(M, created=["p1", "p2"])
    assert not e.children_seen(M, [])
    assert not e.children_seen(M, [pod("p1")])  # p2 not yet
    assert e.children_seen(M, [pod("p1"), pod("p2"), pod("other")])
    assert len(e) == 0
    # once seen, a created child is no longer waited for (e.g. it was evicted since)
    e.expect_children(M, created=["p3"])
    assert not e.children_seen(M, [pod("p1")])
    assert e.children_seen(M, [pod("p3")])


def test_seen_children_stop_being_pending_and_later_records_add_up():
    e = Expectations()
    e.expect_children(M, created=["p1", "p2"])
    assert not e.children_seen(M, [pod("p1")])  # p1 seen: only p2 left
    e.expect_children(M, created=["p3"])
    assert not e.children_seen(M, [pod("p2")])  # p3 still pending; p1 gone since does not matter
    assert e.children_seen(M, [pod("p3")])


def test_deleted_children_are_pending_until_gone_or_being_deleted():
    e = Expectations()
    e.expect_children(M, deleted=["old1", "old2"])
    assert not e.children_seen(M, [pod("old1"), pod("old2")])
    assert not e.children_seen(M, [pod("old1", deleting=True), pod("old2")])
    assert e.children_seen(M, [pod("old1", deleting=True)])  # old2 gone, old1 terminating
    e.expect_children(M, created=["new"], deleted=["old1"])
    assert not e.children_seen(M, [pod("new"), pod("old1")])
    assert e.children_seen(M, [pod("new")])


def test_children_expectations_expire_are_per_owner_and_pruned_with_the_owner():
    clock = Clock()
    e = Expectations(ttl=5, clock=clock)
    e.expect_children(M, created=["p1"])
    other = ("Model", "ns", "other")
    assert e.children_seen(other, [])  # another owner's record is not consulted
    clock.t = 6  # the watch event never came: no longer waited for
    assert e.children_seen(M, [])
    assert len(e) == 0
    e.expect_children(M, created=["p1"])
    e.wrote(M, "1", obj("2", name="m"))
    e.pruner("Model").on_delete(obj("3", name="m"), False)
    assert len(e) == 0 and e.nbytes == 0
    assert e.children_seen(M, [])
    e.expect_children(M)  # nothing to record: nothing stored
    assert len(e) == 0


def test_children_expectations_are_bounded_with_the_rest_of_the_store():
    e = Expectations(max_entries=3)
    for i in range(10):
        e.expect_children(("Model", "ns", str(i)), created=[f"p{i}"])
    assert len(e) == 3
    assert e.children_seen(("Model", "ns", "0"), [])  # evicted, oldest first
    assert not e.children_seen(("Model", "ns", "9"), [])
