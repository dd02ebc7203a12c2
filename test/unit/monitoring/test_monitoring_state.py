"""The scrape-time series of kaiwo_ctrl.monitoring.state (dashboards and alerts read them)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kaiwo_ctrl.monitoring.state import StateCollector, phase

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def job(name, status, gpus=0, created="2027-01-15T07:00:00Z", ns="team-a", **spec):
    return {"metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
            "spec": {"gpus": gpus, **spec}, "status": {"status": status} if status is not None else {}}


def model(name, desired, ready, ns="team-a"):
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"replicas": desired},
            "status": {"replicas": {"all": desired, "ready": ready}}}


def scrape(jobs=(), services=(), models=()) -> dict[tuple[str, tuple], float]:
    r = CollectorRegistry()
    r.register(StateCollector({"KaiwoJob": lambda: list(jobs), "KaiwoService": lambda: list(services)},
                              lambda: list(models), clock=lambda: NOW))
    out = {}
    for fam in text_string_to_metric_families(generate_latest(r).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_workloads_by_status_and_unknown_phases_are_bounded():
    got = scrape(jobs=[job("a", "RUNNING"), job("b", "RUNNING"), job("c", ""), job("d", "pwned-" * 50), job("e", None)],
                 services=[job("s", "READY")])
    assert got[("kaiwo_workloads", (("kind", "KaiwoJob"), ("status", "RUNNING")))] == 2
    assert got[("kaiwo_workloads", (("kind", "KaiwoJob"), ("status", "NEW")))] == 2
    assert got[("kaiwo_workloads", (("kind", "KaiwoJob"), ("status", "OTHER")))] == 1
    assert got[("kaiwo_workloads", (("kind", "KaiwoJob"), ("status", "FAILED")))] == 0  # present from the start
    assert got[("kaiwo_workloads", (("kind", "KaiwoService"), ("status", "READY")))] == 1
    statuses = {dict(labels)["status"] for (name, labels) in got if name == "kaiwo_workloads"}
    assert "pwned-" * 50 not in statuses
    assert phase({"status": {"status": ["list"]}}) == "NEW"


def test_oldest_pending_gpu_workload_per_namespace():
    got = scrape(jobs=[
        job("old", "PENDING", gpus=8, created="2027-01-15T06:00:00Z"),
        job("new", "PENDING", gpus=1, created="2027-01-15T07:30:00Z"),
        job("cpu", "PENDING", gpus=0, created="2027-01-15T00:00:00Z"),  # no GPUs: not counted
        job("per-replica", "PENDING", gpusPerReplica=4, created="2027-01-15T07:50:00Z", ns="team-b"),
        job("running", "RUNNING", gpus=8, created="2027-01-14T00:00:00Z"),
        job("bad-stamp", "PENDING", gpus=8, created="yesterday"),
    ])
    assert got[("kaiwo_gpu_workload_pending_seconds", (("kind", "KaiwoJob"), ("namespace", "team-a")))] == 7200
    assert got[("kaiwo_gpu_workload_pending_seconds", (("kind", "KaiwoJob"), ("namespace", "team-b")))] == 600
    assert len([k for k in got if k[0] == "kaiwo_gpu_workload_pending_seconds"]) == 2


def test_model_replicas_desired_all_ready():
    got = scrape(models=[model("llama", 3, 1), {"metadata": {"name": "new", "namespace": "x"}, "spec": {}}])
    assert got[("kaiwo_model_replicas", (("model_name", "llama"), ("model_namespace", "team-a"), ("state", "desired")))] == 3
    assert got[("kaiwo_model_replicas", (("model_name", "llama"), ("model_namespace", "team-a"), ("state", "ready")))] == 1
    assert got[("kaiwo_model_replicas", (("model_name", "new"), ("model_namespace", "x"), ("state", "ready")))] == 0


def test_registration_does_not_read_the_caches():
    calls = []
    r = CollectorRegistry()
    r.register(StateCollector({"KaiwoJob": lambda: calls.append(1) or []}, lambda: calls.append(2) or []))
    assert calls == []
    generate_latest(r)
    assert calls == [1, 2]


def test_resource_monitor_exports_gpu_use_per_workload():
    """kaiwo_workload_gpu_utilization: the mean of a workload's GPU samples in the last scrape; gone workloads drop out."""
    from prometheus_client import Gauge

    from kaiwo_ctrl.monitoring.gpu import GpuSample, WorkloadRef
    from kaiwo_ctrl.monitoring.monitor import ResourceMonitor

    r = CollectorRegistry()
    mon = ResourceMonitor.__new__(ResourceMonitor)  # only the export step, without a manager
    mon.utilization = Gauge("kaiwo_workload_gpu_utilization", "", ["kind", "namespace", "name"], registry=r)
    a, b = WorkloadRef("KaiwoJob", "team-a", "train", "u1"), WorkloadRef("KaiwoService", "team-b", "serve", "u2")
    sample = lambda v: GpuSample("ns", "pod", "c", "0", "0", v)  # noqa: E731
    mon._export_utilization({a: [sample(10.0), sample(30.0)], b: [sample(90.0)]})
    assert r.get_sample_value("kaiwo_workload_gpu_utilization", {"kind": "KaiwoJob", "namespace": "team-a", "name": "train"}) == 20.0
    mon._export_utilization({b: [sample(50.0)]})
    assert r.get_sample_value("kaiwo_workload_gpu_utilization", {"kind": "KaiwoJob", "namespace": "team-a", "name": "train"}) is None
    assert r.get_sample_value("kaiwo_workload_gpu_utilization", {"kind": "KaiwoService", "namespace": "team-b", "name": "serve"}) == 50.0
