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
