"""GPU utilization monitoring: exposition parsing, label requirements,
namespace rules, grouping, thresholds and termination after terminateUnderutilizedAfter (injected time)."""

from datetime import datetime, timedelta, timezone

import pytest

from api.config.v1alpha1 import KaiwoConfig
from kaiwo_ctrl.monitoring.gpu import (
    GpuSample,
    MonitoringSettings,
    WorkloadRef,
    decide,
    filter_namespaces,
    group_by_workload,
    matches,
    parse_samples,
    workload_of_pod,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
T0S = "2026-01-01T12:00:00Z"
LOW = ("Warning", "GpuUtilizationLow")


def line(value, **labels):
    base = {"namespace": "ns", "pod": "p", "container": "c", "gpu_id": "0", "gpu_partition_id": "0"}
    base.update(labels)
    inner = ",".join(f'{k}="{v}"' for k, v in base.items() if v is not None)
    return f"gpu_gfx_activity{{{inner}}} {value}"


def exposition(*lines):
    return "# HELP gpu_gfx_activity GPU gfx activity in percent\n# TYPE gpu_gfx_activity gauge\n" + "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- parsing


def test_parses_gpu_gfx_activity_samples_with_their_labels():
    text = exposition(line(0.5, gpu_id="3", gpu_partition_id="1"), line(87, pod="q", container="d")) + (
        "# TYPE gpu_power_usage gauge\n"
        'gpu_power_usage{namespace="ns",pod="p",container="c",gpu_id="0",gpu_partition_id="0"} 300\n'
    )
    samples = parse_samples(text)
    assert samples == [
        GpuSample("ns", "p", "c", "3", "1", 0.5),
        GpuSample("ns", "q", "d", "0", "0", 87.0),
    ]


def test_absent_family_gives_no_samples():
    assert parse_samples("# TYPE gpu_power_usage gauge\ngpu_power_usage 1\n") == []
    assert parse_samples("") == []


def test_untyped_family_is_read_too():
    assert parse_samples(line(5) + "\n") == [GpuSample("ns", "p", "c", "0", "0", 5.0)]


@pytest.mark.parametrize("missing", ["namespace", "pod", "container", "gpu_id", "gpu_partition_id"])
def test_samples_without_a_required_label_are_skipped(missing):
    text = exposition(line(0, **{missing: None}), line(0, **{missing: ""}), line(0, pod="kept"))
    assert [s.pod for s in parse_samples(text)] == ["kept"]


def test_malformed_exposition_raises_value_error():
    with pytest.raises(ValueError):
        parse_samples("gpu_gfx_activity{namespace=ns} not-a-number\n")


# --------------------------------------------------------------------------- namespaces


def s(ns="ns", pod="p", value=0.0, gpu="0", part="0"):
    return GpuSample(ns, pod, "c", gpu, part, value)


def test_empty_target_namespaces_drops_kube_system_only():
    samples = [s("kube-system"), s("a"), s("b")]
    assert [x.namespace for x in filter_namespaces(samples, [])] == ["a", "b"]
    assert [x.namespace for x in filter_namespaces(samples, None)] == ["a", "b"]


def test_target_namespaces_keep_only_those():
    samples = [s("kube-system"), s("a"), s("b")]
    assert [x.namespace for x in filter_namespaces(samples, ["b"])] == ["b"]
    assert [x.namespace for x in filter_namespaces(samples, ["kube-system"])] == ["kube-system"]


def test_settings_from_the_kaiwo_config_model():
    cfg = KaiwoConfig.model_validate({"metadata": {"name": "kaiwo"}, "spec": {"resourceMonitoring": {
        "lowUtilizationThreshold": 20, "targetNamespaces": ["x"], "terminateUnderutilized": True,
        "terminateUnderutilizedAfter": "1h30m"}}})
    st = MonitoringSettings.of(cfg.spec.resource_monitoring)
    assert st == MonitoringSettings(20.0, ("x",), True, timedelta(hours=1, minutes=30))
    default = MonitoringSettings.of(KaiwoConfig.model_validate({"metadata": {"name": "kaiwo"}}).spec.resource_monitoring)
    assert default == MonitoringSettings(1.0, (), False, timedelta(hours=24))


# --------------------------------------------------------------------------- grouping


def pod(name, ns="ns", **labels):
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}}


def kaiwo_labels(type_="job", name="w", run_id="uid-1"):
    return {"kaiwo.silogen.ai/type": type_, "kaiwo.silogen.ai/name": name, "kaiwo.silogen.ai/run-id": run_id}


def test_group_by_run_id_keeps_every_sample_of_every_pod():
    pods = {
        ("ns", "w-0"): pod("w-0", **kaiwo_labels()),
        ("ns", "w-1"): pod("w-1", **kaiwo_labels()),
        ("ns", "svc-0"): pod("svc-0", **kaiwo_labels("service", "svc", "uid-2")),
        ("ns", "plain"): pod("plain", app="x"),
        ("ns", "dl"): pod("dl", **{"kaiwo.silogen.ai/type": "downloader", "kaiwo.silogen.ai/run-id": "uid-1"}),
    }
    samples = [s(pod="w-0", gpu="0"), s(pod="w-0", gpu="1"), s(pod="w-1"), s(pod="svc-0"), s(pod="plain"),
               s(pod="dl"), s(pod="missing")]
    groups = group_by_workload(samples, lambda ns, name: pods.get((ns, name)))
    assert groups == {
        WorkloadRef("KaiwoJob", "ns", "w", "uid-1"): [samples[0], samples[1], samples[2]],
        WorkloadRef("KaiwoService", "ns", "svc", "uid-2"): [samples[3]],
    }


def test_pods_without_run_id_label_are_not_workload_pods():
    labels = kaiwo_labels()
    del labels["kaiwo.silogen.ai/run-id"]
    assert workload_of_pod(pod("x", **labels)) is None
    assert workload_of_pod(None) is None
    # an empty run-id (webhook-created workloads) still counts
    assert workload_of_pod(pod("x", **kaiwo_labels(run_id=""))) == WorkloadRef("KaiwoJob", "ns", "w", "")


def test_a_pod_of_an_earlier_workload_of_the_same_name_does_not_match():
    wl = {"metadata": {"name": "w", "namespace": "ns", "uid": "new"}}
    assert matches(WorkloadRef("KaiwoJob", "ns", "w", "new"), wl)
    assert matches(WorkloadRef("KaiwoJob", "ns", "w", ""), wl)
    assert not matches(WorkloadRef("KaiwoJob", "ns", "w", "old"), wl)
    assert not matches(WorkloadRef("KaiwoJob", "ns", "w", "new"), None)


# --------------------------------------------------------------------------- decision


def workload(status="RUNNING", conditions=None, generation=2, **extra):
    st = {"status": status, **extra}
    if conditions is not None:
        st["conditions"] = conditions
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "w", "namespace": "ns", "uid": "uid-1", "generation": generation,
                         "resourceVersion": "7"},
            "spec": {}, "status": st}


def cond(st, type_):
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), None)


def test_low_sample_emits_event_per_sample_and_sets_condition_true():
    settings = MonitoringSettings(low_utilization_threshold=10)
    samples = [s(pod="a", value=3, gpu="1", part="2"), s(pod="b", value=50), s(pod="c", value=9.99, gpu="4")]
    d = decide(workload(), samples, settings, T0)
    assert d.events == [
        ("Warning", "GpuUtilizationLow", "Pod 'a' is underutilizing GPU 1/2"),
        ("Warning", "GpuUtilizationLow", "Pod 'c' is underutilizing GPU 4/0"),
    ]
    c = cond(d.status, "ResourceUnderutilization")
    assert c == {"type": "ResourceUnderutilization", "status": "True", "reason": "GpuUtilizationLow",
                 "message": "One or more GPUs are underutilizing requested resources",
                 "lastTransitionTime": T0S, "observedGeneration": 2}
    assert d.status["status"] == "RUNNING" and not d.terminating


def test_threshold_is_strictly_below():
    settings = MonitoringSettings(low_utilization_threshold=1)
    d = decide(workload(), [s(value=1.0), s(value=float("nan"))], settings, T0)
    assert d.events == []
    assert cond(d.status, "ResourceUnderutilization")["status"] == "False"


def test_normal_utilisation_sets_condition_false():
    d = decide(workload(), [s(value=80)], MonitoringSettings(), T0)
    assert d.events == []
    c = cond(d.status, "ResourceUnderutilization")
    assert (c["status"], c["reason"], c["message"]) == ("False", "GpuUtilizationNormal", "GPU utilization is normal")


def test_other_conditions_and_fields_are_kept():
    other = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "Workload is admitted",
             "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 1}
    w = workload(conditions=[other], startTime="2025-12-31T00:00:00Z", observedGeneration=1)
    d = decide(w, [s(value=0)], MonitoringSettings(), T0)
    assert d.status["conditions"][0] == other
    assert d.status["startTime"] == "2025-12-31T00:00:00Z" and d.status["observedGeneration"] == 1
    assert w["status"]["conditions"] == [other], "the input is not changed"


def test_unchanged_status_means_no_write_but_low_events_still_come():
    first = decide(workload(), [s(value=0)], MonitoringSettings(), T0)
    again = decide(workload(conditions=first.status["conditions"]), [s(value=0)], MonitoringSettings(), T0 + timedelta(minutes=5))
    assert again.status is None
    assert [e[:2] for e in again.events] == [LOW]
    normal = decide(workload(conditions=first.status["conditions"]), [s(value=50)], MonitoringSettings(), T0)
    assert normal.status is not None
    steady = decide(workload(conditions=normal.status["conditions"]), [s(value=50)], MonitoringSettings(), T0 + timedelta(hours=1))
    assert steady.status is None and steady.events == []


def test_transition_time_moves_only_when_the_condition_flips():
    low = decide(workload(), [s(value=0)], MonitoringSettings(), T0).status
    still_low = decide(workload(conditions=low["conditions"]), [s(value=0), s(pod="q", value=0)], MonitoringSettings(),
                       T0 + timedelta(hours=2))
    assert still_low.status is None
    normal = decide(workload(conditions=low["conditions"]), [s(value=90)], MonitoringSettings(), T0 + timedelta(hours=3)).status
    assert cond(normal, "ResourceUnderutilization")["lastTransitionTime"] == "2026-01-01T15:00:00Z"


@pytest.mark.parametrize("state", ["TERMINATING", "TERMINATED", "FAILED", "COMPLETE"])
def test_finished_or_terminating_workloads_are_skipped(state):
    d = decide(workload(state), [s(value=0)], MonitoringSettings(terminate_underutilized=True,
                                                                  terminate_underutilized_after=timedelta(0)), T0)
    assert d.status is None and d.events == [] and not d.terminating


@pytest.mark.parametrize("state", ["", "PENDING", "STARTING", "RUNNING", "READY", "ERROR"])
def test_other_states_are_monitored(state):
    assert decide(workload(state), [s(value=0)], MonitoringSettings(), T0).status is not None


TERM = MonitoringSettings(terminate_underutilized=True, terminate_underutilized_after=timedelta(hours=1))


def test_termination_only_after_continuously_low_for_the_configured_time():
    first = decide(workload(startTime="2026-01-01T11:00:00Z"), [s(value=0)], TERM, T0)
    assert not first.terminating and first.status["status"] == "RUNNING"
    conds = first.status["conditions"]
    w = workload(conditions=conds, startTime="2026-01-01T11:00:00Z")
    at_limit = decide(w, [s(value=0)], TERM, T0 + timedelta(hours=1))
    assert at_limit.status is None and not at_limit.terminating, "not before now - lastTransitionTime > after"
    past = decide(w, [s(value=0)], TERM, T0 + timedelta(hours=1, seconds=1))
    assert past.terminating
    st = past.status
    assert st["status"] == "TERMINATING"
    wte = cond(st, "WorkloadTerminatedEarly")
    assert (wte["status"], wte["reason"], wte["message"]) == (
        "False", "GpuUtilizationLow", "Terminating workload due to underutilized GPU resources")
    assert st["duration"] == 7201
    assert ("Normal", "WorkloadTermination", "Workload has been flagged for termination") in past.events
    assert [e[:2] for e in past.events].count(LOW) == 1


def test_recovery_resets_the_termination_clock():
    low = decide(workload(), [s(value=0)], TERM, T0).status
    normal = decide(workload(conditions=low["conditions"]), [s(value=50)], TERM, T0 + timedelta(minutes=50)).status
    low_again = decide(workload(conditions=normal["conditions"]), [s(value=0)], TERM, T0 + timedelta(minutes=55)).status
    later = decide(workload(conditions=low_again["conditions"]), [s(value=0)], TERM, T0 + timedelta(minutes=90))
    assert not later.terminating and later.status is None


def test_no_termination_when_disabled_or_unparseable():
    low = decide(workload(), [s(value=0)], MonitoringSettings(), T0).status
    w = workload(conditions=low["conditions"])
    assert not decide(w, [s(value=0)], MonitoringSettings(), T0 + timedelta(days=30)).terminating
    broken = MonitoringSettings(terminate_underutilized=True, terminate_underutilized_after=None)
    assert not decide(w, [s(value=0)], broken, T0 + timedelta(days=30)).terminating


def test_normal_utilisation_never_terminates():
    normal = decide(workload(), [s(value=50)], TERM, T0).status
    d = decide(workload(conditions=normal["conditions"]), [s(value=50)], TERM, T0 + timedelta(days=3))
    assert not d.terminating and d.status is None
