import asyncio
import gc

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from kaiwo_ctrl.runtime.observe.metrics import (
    RECONCILE_TIME_BUCKETS,
    WORKQUEUE_DURATION_BUCKETS,
    Metrics,
)
from kaiwo_ctrl.runtime.control.workqueue import WorkQueue


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


def families(m: Metrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(m.render().decode())}


def wq_labels(name: str) -> dict[str, str]:
    return {"name": name, "controller": name}


def test_registry_is_isolated():
    a, b = Metrics(), Metrics()
    assert a.registry is not b.registry
    assert a.registry is not REGISTRY
    a.register_controller("c", 1)
    b.register_controller("c", 1)  # no duplicate-registration clash
    reg = CollectorRegistry()
    assert Metrics(reg).registry is reg


def test_register_controller_initialises_series_to_zero():
    m = Metrics()
    m.register_controller("widget", workers=3)
    get = m.registry.get_sample_value
    for result in ["success", "error", "requeue", "requeue_after"]:
        assert get("controller_runtime_reconcile_total", {"controller": "widget", "result": result}) == 0
    for name in [
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_terminal_reconcile_errors_total",
        "controller_runtime_reconcile_panics_total",
        "controller_runtime_reconcile_timeouts_total",
        "controller_runtime_reconcile_time_seconds_count",
        "controller_runtime_active_workers",
    ]:
        assert get(name, {"controller": "widget"}) == 0, name
    assert get("controller_runtime_max_concurrent_reconciles", {"controller": "widget"}) == 3


def test_metric_types_and_label_names_in_exposition():
    m = Metrics()
    m.register_controller("widget", 1)
    m.workqueue("widget")
    m.leader_election_master_status.labels(name="lock").set(1)
    m.leader_election_slowpath.labels(name="lock").inc()
    m.rest_client_requests.labels(code="200", method="GET", host="api:6443").inc()
    m.rest_client_request_duration.labels(verb="GET", host="api:6443").observe(0.03)
    m.informer_objects("Pod", 4)
    m.informer_watch_restart("Pod", "timeout")
    m.informer_relist("Pod", "initial")
    m.informer_event("Pod", "ADDED")
    fams = families(m)

    expected = {
        # parser strips _total from counter family names
        "controller_runtime_reconcile": ("counter", {"controller", "result"}),
        "controller_runtime_reconcile_errors": ("counter", {"controller"}),
        "controller_runtime_terminal_reconcile_errors": ("counter", {"controller"}),
        "controller_runtime_reconcile_panics": ("counter", {"controller"}),
        "controller_runtime_reconcile_time_seconds": ("histogram", {"controller"}),
        "controller_runtime_max_concurrent_reconciles": ("gauge", {"controller"}),
        "controller_runtime_active_workers": ("gauge", {"controller"}),
        "workqueue_depth": ("gauge", {"name", "controller"}),
        "workqueue_adds": ("counter", {"name", "controller"}),
        "workqueue_queue_duration_seconds": ("histogram", {"name", "controller"}),
        "workqueue_work_duration_seconds": ("histogram", {"name", "controller"}),
        "workqueue_unfinished_work_seconds": ("gauge", {"name", "controller"}),
        "workqueue_longest_running_processor_seconds": ("gauge", {"name", "controller"}),
        "workqueue_retries": ("counter", {"name", "controller"}),
        "leader_election_master_status": ("gauge", {"name"}),
        "leader_election_slowpath": ("counter", {"name"}),
        "rest_client_requests": ("counter", {"code", "method", "host"}),
        "rest_client_request_duration_seconds": ("histogram", {"verb", "host"}),
        "informer_objects": ("gauge", {"kind"}),
        "informer_watch_restarts": ("counter", {"kind", "reason"}),
        "informer_relists": ("counter", {"kind", "reason"}),
        "informer_events": ("counter", {"kind", "type"}),
        "informer_last_event_timestamp_seconds": ("gauge", {"kind"}),
    }
    for name, (typ, labels) in expected.items():
        assert name in fams, name
        fam = fams[name]
        assert fam.type == typ, name
        assert fam.samples, name
        for s in fam.samples:
            assert set(s.labels) - {"le"} == labels, (name, s.labels)

    text = m.render().decode()
    assert "controller_runtime_reconcile_total{" in text
    assert "workqueue_adds_total{" in text
    assert "_created" not in text
    # nothing domain-specific leaks into the runtime's metric names
    assert "kaiwo" not in text.lower()


def test_histogram_buckets():
    assert len(RECONCILE_TIME_BUCKETS) == 40
    assert RECONCILE_TIME_BUCKETS[:6] == (0.005, 0.01, 0.025, 0.05, 0.1, 0.15)
    assert 0.45 in RECONCILE_TIME_BUCKETS and 0.55 not in RECONCILE_TIME_BUCKETS
    assert RECONCILE_TIME_BUCKETS[-7:] == (15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0)
    assert list(RECONCILE_TIME_BUCKETS) == sorted(RECONCILE_TIME_BUCKETS)
    assert WORKQUEUE_DURATION_BUCKETS == (
        1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0
    )

    m = Metrics()
    m.register_controller("c", 1)
    m.workqueue("c")
    fams = families(m)
    rt = {s.labels["le"] for s in fams["controller_runtime_reconcile_time_seconds"].samples if "le" in s.labels}
    assert len(rt) == 41 and "60.0" in rt and "+Inf" in rt
    wd = [s.labels["le"] for s in fams["workqueue_work_duration_seconds"].samples if "le" in s.labels]
    assert wd[0] == "1e-08" and wd[-2] == "1000.0" and len(wd) == 13


async def test_workqueue_reports_adds_depth_durations_and_retries():
    clock = FakeClock()
    m = Metrics()
    q: WorkQueue[str] = WorkQueue("things", metrics=m.workqueue("things"), clock=clock)
    get = m.registry.get_sample_value
    lab = wq_labels("things")
    try:
        q.add("a")
        q.add("a")  # de-duplicated: not counted
        q.add("b")
        assert get("workqueue_adds_total", lab) == 2
        assert get("workqueue_depth", lab) == 2

        clock.advance(2.0)
        assert await q.get() == "a"
        assert get("workqueue_depth", lab) == 1
        assert get("workqueue_queue_duration_seconds_count", lab) == 1
        assert get("workqueue_queue_duration_seconds_sum", lab) == pytest.approx(2.0)

        clock.advance(0.5)
        q.done("a")
        assert get("workqueue_work_duration_seconds_count", lab) == 1
        assert get("workqueue_work_duration_seconds_sum", lab) == pytest.approx(0.5)
        assert get("workqueue_work_duration_seconds_bucket", {**lab, "le": "0.1"}) == 0
        assert get("workqueue_work_duration_seconds_bucket", {**lab, "le": "1.0"}) == 1

        # retries: every add_after with a positive delay, including rate-limited ones
        q.add_after("c", 1.0)
        q.add_after("c", 0.5)
        q.add_after("d", 0)  # immediate: a plain add, not a retry
        q.add_rate_limited("e")
        assert get("workqueue_retries_total", lab) == 3
        assert get("workqueue_adds_total", lab) == 3  # "d" only so far
    finally:
        q.shutdown()


async def test_add_during_processing_counts_and_queue_duration_includes_wait():
    clock = FakeClock()
    m = Metrics()
    q: WorkQueue[str] = WorkQueue("defer", metrics=m.workqueue("defer"), clock=clock)
    get = m.registry.get_sample_value
    lab = wq_labels("defer")
    try:
        q.add("a")
        await q.get()
        clock.advance(1)
        q.add("a")  # new dirty episode starts now
        assert get("workqueue_adds_total", lab) == 2
        assert get("workqueue_depth", lab) == 1  # waiting behind the running one
        clock.advance(3)
        q.done("a")
        await q.get()
        assert get("workqueue_queue_duration_seconds_sum", lab) == pytest.approx(3.0)
    finally:
        q.shutdown()


async def test_in_flight_gauges_are_computed_on_collect():
    clock = FakeClock()
    m = Metrics()
    q: WorkQueue[str] = WorkQueue("inflight", metrics=m.workqueue("inflight"), clock=clock)
    get = m.registry.get_sample_value
    lab = wq_labels("inflight")
    try:
        assert get("workqueue_unfinished_work_seconds", lab) == 0
        assert get("workqueue_longest_running_processor_seconds", lab) == 0
        q.add("a")
        q.add("b")
        await q.get()  # a starts at t0
        clock.advance(4)
        await q.get()  # b starts at t0+4
        clock.advance(1)
        assert get("workqueue_unfinished_work_seconds", lab) == pytest.approx(5 + 1)
        assert get("workqueue_longest_running_processor_seconds", lab) == pytest.approx(5)
        clock.advance(10)  # a stuck worker: the gauges keep rising
        assert get("workqueue_unfinished_work_seconds", lab) == pytest.approx(15 + 11)
        q.done("a")
        assert get("workqueue_longest_running_processor_seconds", lab) == pytest.approx(11)
        q.done("b")
        assert get("workqueue_unfinished_work_seconds", lab) == 0
        assert get("workqueue_longest_running_processor_seconds", lab) == 0
    finally:
        q.shutdown()


async def test_metrics_do_not_keep_a_dropped_queue_alive():
    m = Metrics()
    q: WorkQueue[str] = WorkQueue("gone", metrics=m.workqueue("gone"))
    q.add("a")
    await q.get()
    q.shutdown()
    del q
    gc.collect()
    assert m.registry.get_sample_value("workqueue_unfinished_work_seconds", wq_labels("gone")) == 0
    await asyncio.sleep(0)


def test_informer_hook_methods_update_series():
    now = [1_700_000_000.0]
    m = Metrics(wall_clock=lambda: now[0])
    get = m.registry.get_sample_value
    m.informer_objects("Deployment", 7)
    m.informer_objects("Deployment", 5)
    m.informer_event("Deployment", "ADDED")
    m.informer_event("Deployment", "ADDED")
    now[0] += 30
    m.informer_event("Deployment", "BOOKMARK")
    m.informer_relist("Deployment", "gone")
    m.informer_watch_restart("Deployment", "timeout")
    m.informer_watch_restart("Deployment", "timeout")
    assert get("informer_objects", {"kind": "Deployment"}) == 5
    assert get("informer_events_total", {"kind": "Deployment", "type": "ADDED"}) == 2
    assert get("informer_events_total", {"kind": "Deployment", "type": "BOOKMARK"}) == 1
    assert get("informer_last_event_timestamp_seconds", {"kind": "Deployment"}) == 1_700_000_030.0
    assert get("informer_relists_total", {"kind": "Deployment", "reason": "gone"}) == 1
    assert get("informer_watch_restarts_total", {"kind": "Deployment", "reason": "timeout"}) == 2


def test_metrics_satisfies_informer_hook_shape():
    # the informer reports through these four methods; keep Metrics compatible
    m = Metrics()
    for name, arity in [
        ("informer_event", 2),
        ("informer_objects", 2),
        ("informer_relist", 2),
        ("informer_watch_restart", 2),
    ]:
        fn = getattr(m, name)
        assert callable(fn)
        assert fn.__code__.co_argcount - 1 == arity
