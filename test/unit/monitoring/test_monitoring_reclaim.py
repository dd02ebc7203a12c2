"""Idle-GPU reclaim's pure functions: owner discovery, GPU counts, metrics of both vendors,
aggregation, phases, the reclaim choice and the settings precedence."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from kaiwo_ctrl.monitoring import owners
from kaiwo_ctrl.monitoring.reclaim import Candidate, Observation, aggregate, choose, kueue_gpu_pending, parse_activity, phase_of
from kaiwo_ctrl.monitoring.reclaimsettings import ReclaimConfigError, Settings, opted_in, read_env, resolve, spec_from_annotations
from kaiwo_ctrl.monitoring.reclaimstatus import desired_status

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


def obj(api_version, kind, name, uid, owner=None, **extra):
    meta = {"name": name, "namespace": "team", "uid": uid}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": owner[2], "uid": owner[3], "controller": True}]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **extra}


# (chain from the root down to the Pod's owner) -> expected root kind and chain text
CHAINS = {
    "Job": [("batch/v1", "Job")],
    "Deployment": [("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")],
    "StatefulSet": [("apps/v1", "StatefulSet")],
    "ReplicaSet": [("apps/v1", "ReplicaSet")],
    "RayCluster": [("ray.io/v1", "RayCluster")],
    "RayJob": [("ray.io/v1", "RayJob"), ("ray.io/v1", "RayCluster")],
    "RayService": [("ray.io/v1", "RayService"), ("ray.io/v1", "RayCluster")],
    "KaiwoJob": [("kaiwo.silogen.ai/v1alpha1", "KaiwoJob"), ("batch/v1", "Job")],
    "KaiwoService": [("kaiwo.silogen.ai/v1alpha1", "KaiwoService"), ("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")],
    "AppWrapper": [("workload.codeflare.dev/v1beta2", "AppWrapper"), ("ray.io/v1", "RayCluster")],
}


def build(chain):
    """The objects of ``chain`` (root first) and a Pod under the last one."""
    store, parent = {}, None
    for i, (av, kind) in enumerate(chain):
        o = obj(av, kind, f"{kind.lower()}-x", f"uid-{i}", owner=parent)
        store[(kind, o["metadata"]["name"])] = o
        parent = (av, kind, o["metadata"]["name"], f"uid-{i}")
    pod = obj("v1", "Pod", "pod-0", "uid-pod", owner=parent)
    return store, pod


def lookup_in(store, calls=None):
    async def lookup(api_version, kind, namespace, name):
        if calls is not None:
            calls.append((kind, name))
        return store.get((kind, name))
    return lookup


@pytest.mark.parametrize("root_kind", sorted(CHAINS))
def test_root_owner_of_every_kind(root_kind):
    store, pod = build(CHAINS[root_kind])
    root = asyncio.run(owners.resolve_root(pod, lookup_in(store)))
    assert root is not None and root.kind == root_kind and root.uid == "uid-0"
    expected = " -> ".join(["Pod/pod-0"] + [f"{k}/{k.lower()}-x" for _, k in reversed(CHAINS[root_kind])])
    assert root.chain == expected
    assert root.ref() == {"apiVersion": CHAINS[root_kind][0][0], "kind": root_kind, "name": f"{root_kind.lower()}-x", "uid": "uid-0"}


def test_bare_pod_is_its_own_root_without_lookups():
    calls: list = []
    pod = obj("v1", "Pod", "lonely", "uid-p")
    root = asyncio.run(owners.resolve_root(pod, lookup_in({}, calls)))
    assert (root.kind, root.name, root.chain, calls) == ("Pod", "lonely", "Pod/lonely", [])


@pytest.mark.parametrize(
    "case",
    ["unsupported", "gone", "uid-mismatch", "loop"],
)
def test_root_owner_unresolvable(case):
    store, pod = build(CHAINS["Job"])
    if case == "unsupported":
        store[("Job", "job-x")]["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "CronJob", "name": "c", "uid": "c1", "controller": True}]
        with pytest.raises(owners.OwnerUnresolvable):
            asyncio.run(owners.resolve_root(pod, lookup_in(store)))
        return
    if case == "gone":
        store.clear()
    if case == "uid-mismatch":
        store[("Job", "job-x")]["metadata"]["uid"] = "another"
    if case == "loop":
        store[("Job", "job-x")]["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "job-x", "uid": "uid-0", "controller": True}]
        with pytest.raises(owners.OwnerUnresolvable):
            asyncio.run(owners.resolve_root(pod, lookup_in(store)))
        return
    assert asyncio.run(owners.resolve_root(pod, lookup_in(store))) is None


@pytest.mark.parametrize(
    "spec,expected",
    [
        ({"containers": [{"resources": {"limits": {"amd.com/gpu": "2"}}}]}, {"amd.com/gpu": 2}),
        ({"containers": [{"resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}}]}, {"nvidia.com/gpu": 1}),
        ({"containers": [{"resources": {"limits": {"amd.com/gpu": "1"}}}, {"resources": {"limits": {"amd.com/gpu": "3"}}}]}, {"amd.com/gpu": 4}),
        ({"containers": [{"resources": {"limits": {"amd.com/gpu": "1"}}}], "initContainers": [{"resources": {"limits": {"amd.com/gpu": "2"}}}]}, {"amd.com/gpu": 2}),
        ({"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1", "cpu": "4", "memory": "1Gi"}}}]}, {"nvidia.com/mig-1g.10gb": 1}),
        ({"containers": [{"resources": {"limits": {"cpu": "4"}}}]}, {}),
        ({"containers": [{"resources": {"limits": {"amd.com/gpu": "bogus"}}}]}, {}),
    ],
)
def test_pod_gpus(spec, expected):
    assert owners.pod_gpus(spec) == expected


def test_template_gpus_counts_parallelism_and_replicas():
    tpl = {"template": {"spec": {"containers": [{"resources": {"limits": {"amd.com/gpu": "2"}}}]}}}
    assert owners.template_gpus({"kind": "Job", "spec": {"parallelism": 3, **tpl}}) == {"amd.com/gpu": 6}
    assert owners.template_gpus({"kind": "Deployment", "spec": {"replicas": 2, **tpl}}) == {"amd.com/gpu": 4}
    assert owners.template_gpus({"kind": "Job", "spec": tpl}) == {"amd.com/gpu": 2}
    assert owners.template_gpus({"kind": "KaiwoJob", "spec": {"gpus": 4}}) == {}


def test_record_name_as_upstream_and_bounded():
    assert owners.record_name("Job", "training", "a1b2c3d4-e5f6") == "job-training-a1b2c3d4"
    long = owners.record_name("Deployment", "x" * 253, "a1b2c3d4-e5f6")
    assert len(long) <= 253 and long.endswith("-a1b2c3d4")


AMD = """# TYPE gpu_gfx_activity gauge
gpu_gfx_activity{gpu_id="0",namespace="team",pod="a"} 3.0
gpu_gfx_activity{gpu_id="1",namespace="team",pod="a"} 9.0
gpu_gfx_activity{gpu_id="2",namespace="",pod=""} 50.0
gpu_power_usage{gpu_id="0",namespace="team",pod="a"} 300
"""
NVIDIA = """# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",namespace="team",pod="b",container="c"} 87
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2",namespace="team",pod="b",container="c"} NaN
"""


def test_parse_activity_both_vendors():
    assert parse_activity(AMD + NVIDIA) == {("team", "a"): {"0": 3.0, "1": 9.0}, ("team", "b"): {"0": 87.0}}


def test_parse_activity_malformed_raises():
    with pytest.raises(ValueError):
        parse_activity("gpu_gfx_activity{namespace=\"x\" 1\n")


@pytest.mark.parametrize(
    "policy,expected",
    [("Min", 6.0), ("Max", 50.0), ("Avg", 28.0)],
)
def test_aggregate_means_per_pod_then_policy(policy, expected):
    per_pod = {"a": {"0": 3.0, "1": 9.0}, "b": {"0": 50.0}}  # pod means 6 and 50
    assert aggregate(per_pod, policy) == expected


def test_aggregate_without_samples_is_none():
    assert aggregate({}, "Max") is None and aggregate({"a": {}}, "Avg") is None


SETTINGS = Settings(threshold=5.0, grace_period=timedelta(minutes=10), policy="OnPressure", aggregation="Max", ttl=timedelta(hours=24))


def pod(name, phase="Running", unschedulable=""):
    p = {"metadata": {"name": name}, "status": {"phase": phase}}
    if unschedulable:
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}]
    return p


@pytest.mark.parametrize(
    "previous,obs,expected",
    [
        ("", Observation(owner_gone=True), ("Deleted", False)),
        ("", Observation(pods=[pod("a", "Pending", "0/3 nodes are available: 3 Insufficient amd.com/gpu.")]), ("PendingGpu", False)),
        ("", Observation(pods=[pod("a", "Pending", "0/3 nodes are available: 3 Insufficient cpu.")]), ("PendingOther", False)),
        ("", Observation(kueue_pending=True), ("PendingGpu", False)),
        ("", Observation(), ("PendingOther", False)),
        ("", Observation(pods=[pod("a")], scrape_ok=True, samples={"a": {"0": 2.0}}), ("Idle", True)),
        ("", Observation(pods=[pod("a")], scrape_ok=True, samples={"a": {"0": 40.0}}), ("Active", True)),
        # no fresh samples: never newly Idle (upstream: 0% -> Idle), an Idle one keeps its clock
        ("Active", Observation(pods=[pod("a")], scrape_ok=True, samples={}), ("Active", False)),
        ("", Observation(pods=[pod("a")], scrape_ok=False), ("Active", False)),
        ("Idle", Observation(pods=[pod("a")], scrape_ok=False), ("Idle", False)),
        # one of two running Pods unsampled: no evidence
        ("", Observation(pods=[pod("a"), pod("b")], scrape_ok=True, samples={"a": {"0": 1.0}}), ("Active", False)),
    ],
)
def test_phase(previous, obs, expected):
    phase, _, evidence = phase_of(previous, obs, SETTINGS, ["amd.com/gpu"])
    assert (phase, evidence) == expected


def test_kueue_pending_needs_quota_not_reserved_for_a_gpu():
    def wl(status, message):
        return {"status": {"conditions": [{"type": "QuotaReserved", "status": status, "message": message}]}}
    assert kueue_gpu_pending(wl("False", "couldn't assign flavors to pod set main: insufficient quota for amd.com/gpu in flavor f"), ["amd.com/gpu"])
    assert not kueue_gpu_pending(wl("False", "insufficient quota for cpu in flavor f"), ["amd.com/gpu"])
    assert not kueue_gpu_pending(wl("True", "Quota reserved in ClusterQueue q"), ["amd.com/gpu"])
    assert not kueue_gpu_pending(None, ["amd.com/gpu"])


def cand(name, phase, gpus, *, idle_min=None, policy="OnPressure", created="", evidence=True, preempted_for=""):
    s = Settings(5.0, timedelta(minutes=10), policy, "Max", timedelta(hours=24))
    since = NOW - timedelta(minutes=idle_min) if idle_min is not None else None
    return Candidate(name, phase, {"amd.com/gpu": gpus}, s, created=created, idle_since=since, evidence=evidence, preempted_for=preempted_for)


CHOICES = [
    ("no demand: OnPressure keeps idle workloads", [cand("a", "Idle", 4, idle_min=60)], []),
    ("oldest idle first, only enough", [cand("p", "PendingGpu", 4), cand("young", "Idle", 4, idle_min=20), cand("old", "Idle", 4, idle_min=90)], [("old", "p")]),
    ("several victims add up to the demand", [cand("p", "PendingGpu", 6), cand("a", "Idle", 4, idle_min=90), cand("b", "Idle", 4, idle_min=60), cand("c", "Idle", 4, idle_min=30)], [("a", "p"), ("b", "p")]),
    ("all or nothing", [cand("p", "PendingGpu", 8), cand("a", "Idle", 4, idle_min=90)], []),
    ("inside the grace period: not reclaimable", [cand("p", "PendingGpu", 4), cand("a", "Idle", 4, idle_min=5)], []),
    ("without fresh samples: not reclaimable", [cand("p", "PendingGpu", 4), cand("a", "Idle", 4, idle_min=90, evidence=False)], []),
    ("an active workload is never taken", [cand("p", "PendingGpu", 4), cand("a", "Active", 4)], []),
    ("already being freed for it: nothing more", [cand("p", "PendingGpu", 4), cand("f", "Preempting", 4, preempted_for="p"), cand("a", "Idle", 4, idle_min=90)], []),
    ("just reclaimed for it: nothing more while it settles", [cand("p", "PendingGpu", 4), Candidate("f", "Preempted", {"amd.com/gpu": 4}, SETTINGS, preempted_for="p", preempted_at=NOW - timedelta(minutes=1)), cand("a", "Idle", 4, idle_min=90)], []),
    ("reclaimed for it long ago: its GPUs went elsewhere", [cand("p", "PendingGpu", 4), Candidate("f", "Preempted", {"amd.com/gpu": 4}, SETTINGS, preempted_for="p", preempted_at=NOW - timedelta(minutes=30)), cand("a", "Idle", 4, idle_min=90)], [("a", "p")]),
    ("oldest pending served first, victims not shared", [cand("p2", "PendingGpu", 4, created="2026-02"), cand("p1", "PendingGpu", 4, created="2026-01"), cand("a", "Idle", 4, idle_min=90)], [("a", "p1")]),
    ("Always: idle past the grace period, no demand needed", [cand("a", "Idle", 4, idle_min=11, policy="Always"), cand("b", "Idle", 4, idle_min=9, policy="Always")], [("a", "")]),
    ("Always victims count toward the demand", [cand("p", "PendingGpu", 4), cand("al", "Idle", 4, idle_min=30, policy="Always"), cand("on", "Idle", 4, idle_min=90)], [("al", "")]),
]


@pytest.mark.parametrize("title,candidates,expected", CHOICES, ids=[c[0] for c in CHOICES])
def test_choose(title, candidates, expected):
    assert [(v.name, v.preempted_for) for v in choose(candidates, NOW)] == expected


def test_choose_matches_by_resource_name():
    pending = Candidate("p", "PendingGpu", {"nvidia.com/gpu": 1}, SETTINGS)
    idle = cand("a", "Idle", 4, idle_min=90)
    assert choose([pending, idle], NOW) == []


ENV = {"GPU_PREEMPTION_DEFAULT_THRESHOLD": "7", "GPU_PREEMPTION_DEFAULT_GRACE_PERIOD": "20m", "GPU_PREEMPTION_DEFAULT_POLICY": "Always"}
CONFIG = {"defaultThreshold": 9, "defaultGracePeriod": "30m"}


@pytest.mark.parametrize(
    "workload,namespace,config,env,expected",
    [
        ({}, {}, {}, {}, (5.0, timedelta(minutes=10), "OnPressure", "Max", timedelta(hours=24))),
        ({}, {}, {}, ENV, (7.0, timedelta(minutes=20), "Always", "Max", timedelta(hours=24))),
        ({}, {}, CONFIG, ENV, (9.0, timedelta(minutes=30), "Always", "Max", timedelta(hours=24))),
        ({}, {"threshold": "11", "ttl": "0"}, CONFIG, ENV, (11.0, timedelta(minutes=30), "Always", "Max", timedelta(0))),
        ({"threshold": "13", "policy": "OnPressure", "aggregation": "Min"}, {"threshold": "11"}, CONFIG, ENV,
         (13.0, timedelta(minutes=30), "OnPressure", "Min", timedelta(hours=24))),
        # an invalid layer is skipped, the next one wins
        ({"threshold": "lots"}, {}, {"defaultThreshold": 9}, {}, (9.0, timedelta(minutes=10), "OnPressure", "Max", timedelta(hours=24))),
    ],
)
def test_settings_precedence(workload, namespace, config, env, expected):
    prefix = "kaiwo.silogen.ai/gpu-preemption."
    merged = owners.merge_annotations(prefix, {prefix + k: v for k, v in namespace.items()}, {prefix + k: v for k, v in workload.items()})
    spec, _ = spec_from_annotations(merged)
    s = resolve(spec, config, env)
    assert (s.threshold, s.grace_period, s.policy, s.aggregation, s.ttl) == expected


def test_invalid_annotations_are_reported():
    spec, errors = spec_from_annotations({"kaiwo.silogen.ai/gpu-preemption.policy": "Sometimes", "kaiwo.silogen.ai/gpu-preemption.threshold": "150"})
    assert spec == {} and len(errors) == 2 and "policy" in errors[0] + errors[1]


@pytest.mark.parametrize(
    "annotations,expected",
    [
        ({}, False),
        ({"kaiwo.silogen.ai/gpu-preemption.enabled": "true"}, True),
        ({"kaiwo.silogen.ai/gpu-preemption.grace-period": "5m"}, True),
        ({"kaiwo.silogen.ai/gpu-preemption.enabled": "false", "kaiwo.silogen.ai/gpu-preemption.grace-period": "5m"}, False),
        ({"kaiwo.silogen.ai/other": "x"}, False),
    ],
)
def test_opt_in(annotations, expected):
    assert opted_in(annotations) is expected


def test_env_read_and_rejected():
    assert read_env({}) is None
    env = read_env({"GPU_PREEMPTION_ENABLED": "true", "GPU_PREEMPTION_METRICS_ENDPOINT": "http://127.0.0.1:9400/metrics"})
    assert env is not None and env.interval == 15.0
    ok = {"GPU_PREEMPTION_ENABLED": "true", "GPU_PREEMPTION_METRICS_ENDPOINT": "http://127.0.0.1:1/m"}
    for bad in ({"GPU_PREEMPTION_METRICS_ENDPOINT": ""}, {"GPU_PREEMPTION_METRICS_ENDPOINT": "ftp://x"},
                {"GPU_PREEMPTION_POLLING_INTERVAL": "0"}, {"GPU_PREEMPTION_DEFAULT_POLICY": "Never"},
                {"GPU_PREEMPTION_DEFAULT_GRACE_PERIOD": "ten minutes"}):
        with pytest.raises(ReclaimConfigError):
            read_env({**ok, **bad})


def record(status=None):
    return {"metadata": {"name": "job-x-1", "namespace": "team", "generation": 1},
            "spec": {"workloadRef": {"kind": "Job", "name": "x"}, "gpuResources": {"amd.com/gpu": 1}}, "status": status or {}}


def test_status_idle_since_kept_and_writes_only_on_change():
    obs = Observation(pods=[pod("a")], scrape_ok=True, samples={"a": {"0": 2.0}})
    first, events, _ = desired_status(record(), obs, SETTINGS, NOW)
    assert first["phase"] == "Idle" and first["idleSince"] == "2026-11-28T12:00:00Z" and [e[1] for e in events] == ["WorkloadIdle"]
    later = NOW + timedelta(minutes=5)
    obs2 = Observation(pods=[pod("a")], scrape_ok=True, samples={"a": {"0": 2.4}})  # moved < 1 point
    second, events2, _ = desired_status(record(first), obs2, SETTINGS, later)
    assert second == first and events2 == []
    active, events3, _ = desired_status(record(first), Observation(pods=[pod("a")], scrape_ok=True, samples={"a": {"0": 60.0}}), SETTINGS, later)
    assert active["phase"] == "Active" and "idleSince" not in active and [e[1] for e in events3] == ["WorkloadActive"]


def test_trim_gpu_pod_keeps_only_what_reclaim_reads():
    plain = {"metadata": {"name": "web", "namespace": "team", "uid": "u1", "resourceVersion": "7", "labels": {"a": "b"},
                          "annotations": {"secret-ish": "x"}, "ownerReferences": [{"uid": "o"}]},
             "spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}, "env": [{"name": "TOKEN", "value": "t"}]}]}}
    assert owners.trim_gpu_pod(plain) == {"apiVersion": "v1", "kind": "Pod",
                                          "metadata": {"name": "web", "namespace": "team", "uid": "u1", "resourceVersion": "7"}}
    gpu = {"metadata": {"name": "train", "namespace": "team", "uid": "u2", "ownerReferences": [{"uid": "o"}],
                        "annotations": {"kaiwo.silogen.ai/gpu-preemption.policy": "Always", "other": "x"}},
           "spec": {"containers": [{"resources": {"limits": {"amd.com/gpu": "2"}}, "env": [{"name": "TOKEN", "value": "t"}]}]},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}, {"type": "Ready", "status": "False"}]}}
    out = owners.trim_gpu_pod(gpu)
    assert out["metadata"]["annotations"] == {"kaiwo.silogen.ai/gpu-preemption.policy": "Always"}
    assert owners.pod_gpus(out["spec"]) == {"amd.com/gpu": 2} and "TOKEN" not in str(out)
    assert out["status"] == {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
