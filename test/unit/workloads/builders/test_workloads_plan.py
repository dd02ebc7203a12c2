"""One plan per reconcile: the KaiwoJob is parsed, validated and its GPU plan
derived once, and both the desired children and the status read that plan.

The counting is done with ``sys.setprofile`` over the real functions (no
patching), following the path the reconciler takes for one pass: the plan,
the desired children, the status, the desired children again after the
download state changed, and the status once more after its own write."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

import pytest

from kaiwo_ctrl.workloads.reconcile.desired import desired_pairs
from kaiwo_ctrl.workloads.base.gpu import GpuCapacity, cluster_gpu_stats
from kaiwo_ctrl.workloads.kinds import KAIWOJOB
from kaiwo_ctrl.workloads.base.observed import ObservedChildren
from kaiwo_ctrl.workloads.builders.plan import WorkloadPlan
from kaiwo_ctrl.workloads.observe.status import observe
from kaiwo_ctrl.workloads.base.world import World

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
NODES = [{"metadata": {"name": f"g{i}", "labels": {"kaiwo/nodepool": "amd-mi300x-8gpu-96core-1024gi"}},
          "status": {"allocatable": {"amd.com/gpu": "8"}}} for i in range(4)]
WORLD = World.from_dicts(nodes=NODES, queue_config={"clusterQueues": [{"name": "kaiwo"}]})
#: workloads/, whose layered subpackages (not kinds/) hold the modules counted below
PKG = os.path.dirname(os.path.dirname(sys.modules[WorkloadPlan.__module__].__file__ or ""))


def kaiwojob(**spec) -> dict:
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "train", "namespace": "ns", "uid": "u-1", "generation": 1},
            "spec": {"image": "busybox", "entrypoint": "sleep 1", **spec}}


@contextmanager
def calls() -> Iterator[tuple[Counter, Counter]]:
    """Count calls of functions of the workloads package by (module, function),
    and entries into each module from code outside it."""
    by_function: Counter = Counter()
    entries: Counter = Counter()

    def profile(frame, event, _arg):
        if event != "call":
            return
        code = frame.f_code
        folder = os.path.dirname(code.co_filename)
        if os.path.dirname(folder) != PKG or os.path.basename(folder) == "kinds":
            return
        module = os.path.basename(code.co_filename)
        by_function[(module, code.co_qualname)] += 1
        caller = frame.f_back.f_code.co_filename if frame.f_back else ""
        if caller != code.co_filename:
            entries[module] += 1

    sys.setprofile(profile)
    try:
        yield by_function, entries
    finally:
        sys.setprofile(None)


def one_pass(raw: dict, world: World = WORLD, plan_of: Callable = WorkloadPlan.of) -> tuple[list, dict]:
    """What the reconciler does with one KaiwoJob in one pass, pure."""
    plan = plan_of(raw, world)
    pairs = desired_pairs(plan, download_succeeded=False)
    status = observe(KAIWOJOB, raw, world, ObservedChildren(), None, NOW, plan=plan)
    pairs = desired_pairs(plan, download_succeeded=True)
    written = {**raw, "status": status}
    observe(KAIWOJOB, written, world, ObservedChildren(), None, NOW, plan=plan.with_object(written))
    return pairs, status


ONCE = [
    ("kaiwoobject.py", "KaiwoObject.of"),
    ("validation.py", "validate"),
    ("validation.py", "_gpu_errors"),
    ("gpu.py", "derive_gpu_plan"),
    ("gpu.py", "check_queue"),
    ("gpu.py", "check_gpus"),
    ("storage.py", "StoragePlan.of"),
]


def test_a_pass_parses_validates_and_derives_the_gpu_plan_once():
    raw = kaiwojob(gpus=12)
    # the GPU capacity table is per World (shared by every pass until the nodes change), not per pass
    assert WORLD.gpu_capacity.stats("amd").total_gpus == 32
    with calls() as (by_function, entries):
        pairs, status = one_pass(raw)
    for key in ONCE:
        assert by_function[key] == 1, (key, by_function[key])
    assert entries["validation.py"] == 1  # the gpus walk enters validation once
    assert by_function[("gpu.py", "cluster_gpu_stats")] == 0
    # and the plan reached the Job: 12 GPUs over nodes of 8 -> 2 replicas of 6
    (spec, job), = [(s, c) for s, c in pairs if s.main]
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["amd.com/gpu"] == "6"
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["NUM_GPUS"], env["NUM_REPLICAS"], env["NUM_GPUS_PER_REPLICA"]) == ("12", "2", "6")
    assert status["status"] == "PENDING"


def test_the_counter_sees_a_second_plan():
    """The check above can fail: a pass that plans twice is counted twice."""

    def twice(raw: dict, world: World) -> WorkloadPlan:
        WorkloadPlan.of(raw, world)
        return WorkloadPlan.of(raw, world)

    with calls() as (by_function, entries):
        one_pass(kaiwojob(gpus=12), plan_of=twice)
    assert by_function[("validation.py", "validate")] == 2
    assert entries["validation.py"] == 2


def test_an_invalid_spec_is_planned_once_and_reported_by_both():
    raw = kaiwojob(gpus=-1)
    with calls() as (by_function, _):
        plan = WorkloadPlan.of(raw, WORLD)
        error = desired_pairs(plan)
        status = observe(KAIWOJOB, raw, WORLD, ObservedChildren(), None, NOW, plan=plan)
    assert by_function[("validation.py", "validate")] == 1
    assert error.field == "spec.gpus"
    assert status["status"] == "ERROR" and "spec.gpus" in status["conditions"][0]["message"]
    assert plan.queue_failure is None and plan.capacity is None


def test_the_plan_is_frozen():
    plan = WorkloadPlan.of(kaiwojob(), WORLD)
    with pytest.raises(AttributeError):
        plan.gpu = None  # type: ignore[misc]
    assert not hasattr(plan, "__dict__")


def node(pool: str | None, alloc: int | None, key: str, unschedulable: bool = False) -> dict:
    n: dict = {"metadata": {"labels": {"kaiwo/nodepool": pool} if pool else {}}, "status": {}}
    if alloc is not None:
        n["status"]["allocatable"] = {key: str(alloc)}
    if unschedulable:
        n["spec"] = {"unschedulable": True}
    return n


MIXED = [
    node("amd-mi300x-8gpu-96core-1024gi", 8, "amd.com/gpu"),
    node("AMD-mi250-4gpu-64core-512gi", 4, "amd.com/gpu"),
    node("nvidia-a100-8gpu-64core-512gi", 8, "nvidia.com/gpu", unschedulable=True),
    node("nvidia-h100-4gpu-64core-512gi", 2, "nvidia.com/gpu"),
    node("intel-max-2gpu-8core-64gi", 2, "amd.com/gpu"),
    node("cpu-only-0gpu-8core-16gi", None, "amd.com/gpu"),
    node("odd", None, "amd.com/gpu"),
    node(None, 8, "amd.com/gpu"),
]


@pytest.mark.parametrize("vendor", ["amd", "AMD", "Amd", "nvidia", "NVIDIA", "intel", "Intel", "cpu", "odd", "none", ""])
@pytest.mark.parametrize("default_key", ["amd.com/gpu", "example.com/gpu"])
def test_the_capacity_table_answers_as_the_per_vendor_count(vendor, default_key):
    assert GpuCapacity(MIXED, default_key).stats(vendor) == cluster_gpu_stats(MIXED, vendor, default_key)
