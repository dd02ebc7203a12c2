"""The RESOURCE_MONITORING_* environment and the
registration of the leader-only runnable; one Pod informer shared with the
workload controllers; the workload status machine keeps what the monitor
writes (no write battle)."""

from datetime import datetime, timedelta, timezone

import pytest

from kaiwo_ctrl.monitoring import MonitoringConfigError, read_env, setup
from kaiwo_ctrl.monitoring.gpu import GpuSample, MonitoringSettings, decide
from kaiwo_ctrl.runtime.api.client import Client, RestConfig
from kaiwo_ctrl.runtime.manager.manager import LEADER, Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.runtime.api.resources import PODS
from kaiwo_ctrl.workloads.reconcile import controller as workloads
from kaiwo_ctrl.workloads.observe.status import ObservedChildren, observe
from kaiwo_ctrl.workloads.base.world import World

ON = {"RESOURCE_MONITORING_ENABLED": "true",
      "RESOURCE_MONITORING_METRICS_ENDPOINT": "http://exporter.kube-amd-gpu:5000/metrics",
      "RESOURCE_MONITORING_POLLING_INTERVAL": "1m30s"}


def manager() -> Manager:
    # nothing is started, so the manager never talks to this address
    return Manager(Client(RestConfig(host="http://127.0.0.1:9")), metrics=Metrics(), metrics_addr=None, health_addr=None)


# --------------------------------------------------------------------------- environment


@pytest.mark.parametrize("value", [None, "", "false", "True", "TRUE", "1", "yes"])
def test_disabled_unless_exactly_true(value):
    env = {k: v for k, v in ON.items() if k != "RESOURCE_MONITORING_ENABLED"}
    if value is not None:
        env["RESOURCE_MONITORING_ENABLED"] = value
    assert read_env(env) is None
    mgr = manager()
    assert setup(mgr, environ=env) is None
    assert mgr._runnables[LEADER] == []


def test_disabled_ignores_bad_values():
    assert read_env({"RESOURCE_MONITORING_POLLING_INTERVAL": "soon"}) is None


def test_enabled_reads_endpoint_and_interval():
    env = read_env(ON)
    assert env.endpoint == ON["RESOURCE_MONITORING_METRICS_ENDPOINT"]
    assert env.interval == 90.0


@pytest.mark.parametrize("changes,message", [
    ({"RESOURCE_MONITORING_METRICS_ENDPOINT": None}, "RESOURCE_MONITORING_METRICS_ENDPOINT must be set"),
    ({"RESOURCE_MONITORING_METRICS_ENDPOINT": "  "}, "RESOURCE_MONITORING_METRICS_ENDPOINT must be set"),
    ({"RESOURCE_MONITORING_METRICS_ENDPOINT": "exporter:5000/metrics"}, "must be an http:// or https:// URL"),
    ({"RESOURCE_MONITORING_METRICS_ENDPOINT": "ftp://x/metrics"}, "must be an http:// or https:// URL"),
    ({"RESOURCE_MONITORING_POLLING_INTERVAL": None}, "RESOURCE_MONITORING_POLLING_INTERVAL must be set"),
    ({"RESOURCE_MONITORING_POLLING_INTERVAL": "10"}, "is not a duration"),
    ({"RESOURCE_MONITORING_POLLING_INTERVAL": "ten seconds"}, "is not a duration"),
    ({"RESOURCE_MONITORING_POLLING_INTERVAL": "0s"}, "must be longer than zero"),
])
def test_bad_environment_fails_with_a_clear_error(changes, message):
    env = dict(ON)
    for k, v in changes.items():
        if v is None:
            env.pop(k)
        else:
            env[k] = v
    with pytest.raises(MonitoringConfigError, match=message):
        read_env(env)
    mgr = manager()
    with pytest.raises(MonitoringConfigError, match=message):
        setup(mgr, environ=env)
    assert mgr._runnables[LEADER] == []


def test_setup_reads_the_process_environment(monkeypatch):
    for k, v in ON.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RESOURCE_MONITORING_POLLING_INTERVAL", "bogus")
    with pytest.raises(MonitoringConfigError):
        setup(manager())


# --------------------------------------------------------------------------- registration


def test_enabled_registers_one_leader_runnable_and_shares_the_pod_informer():
    mgr = manager()
    workloads.setup(mgr, workers=1)
    pods_before = [i for i in mgr.cache.informers if i.resource == PODS]
    monitor = setup(mgr, environ=ON)
    assert monitor is not None and monitor.interval == 90.0
    assert [name for name, _ in mgr._runnables[LEADER] if name == "resource-monitor"] == ["resource-monitor"]
    pods = [i for i in mgr.cache.informers if i.resource == PODS]
    assert len(pods) == 1 and pods == pods_before, "one Pod informer for the whole process"
    assert monitor.pods is pods[0] and pods[0].transform is workloads.trim_pod
    assert not [c for c in mgr.controllers if c.name == "resource-monitor"], "a runnable, not a controller"


def test_monitor_first_then_workloads_still_one_pod_informer():
    mgr = manager()
    monitor = setup(mgr, environ=ON)
    workloads.setup(mgr, workers=1)
    pods = [i for i in mgr.cache.informers if i.resource == PODS]
    assert len(pods) == 1 and monitor.pods is pods[0]
    trimmed = pods[0].transform({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "namespace": "n", "uid": "u", "resourceVersion": "1", "labels": {"a": "b"},
        "annotations": {"big": "x" * 1000}, "managedFields": [{}]}, "spec": {"containers": []}, "status": {}})
    assert set(trimmed["metadata"]) <= {"name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences",
                                        "deletionTimestamp"}
    assert "spec" not in trimmed and "status" not in trimmed


# --------------------------------------------------------------------------- no write battle


T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
WORLD = World.from_dicts(nodes=[], queue_config={"clusterQueues": [{"name": "kaiwo"}]})


def kjob(status):
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {}, "status": status}


def test_workload_observation_keeps_the_monitor_condition():
    pending = observe("KaiwoJob", kjob({}), WORLD, ObservedChildren(), None, T0)
    flagged = decide(kjob(pending), [GpuSample("ns", "p", "c", "0", "0", 0.0)], MonitoringSettings(), T0).status
    again = observe("KaiwoJob", kjob(flagged), WORLD, ObservedChildren(), None, T0 + timedelta(minutes=1))
    assert again == flagged, "re-observing must neither drop nor rewrite ResourceUnderutilization"


def test_monitor_terminating_becomes_terminated_with_gpu_reason():
    pending = observe("KaiwoJob", kjob({}), WORLD, ObservedChildren(), None, T0)
    settings = MonitoringSettings(terminate_underutilized=True, terminate_underutilized_after=timedelta(seconds=10))
    low = decide(kjob(pending), [GpuSample("ns", "p", "c", "0", "0", 0.0)], settings, T0).status
    term = decide(kjob(low), [GpuSample("ns", "p", "c", "0", "0", 0.0)], settings, T0 + timedelta(seconds=11)).status
    assert term["status"] == "TERMINATING"
    done = observe("KaiwoJob", kjob(term), WORLD, ObservedChildren(), None, T0 + timedelta(seconds=12))
    assert done["status"] == "TERMINATED"
    by_type = {c["type"]: (c["status"], c["reason"], c["message"]) for c in done["conditions"]}
    assert by_type["WorkloadTerminatedEarly"] == (
        "True", "GpuUtilizationLow", "Terminating workload due to underutilized GPU resources")
    assert by_type["ResourceUnderutilization"][:2] == ("True", "GpuUtilizationLow")
