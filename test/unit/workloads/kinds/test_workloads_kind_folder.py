"""A new child kind is one folder (its ``ChildSpec`` entry, builder and status
mapper) and one registry line: defined here, in the test, and run through
the generic path the reconciler takes (plan -> desired children -> observed
children -> status), pure functions, no cluster.

The toy is a ConfigMap-backed main object for a non-Ray KaiwoJob: its
builder writes the GPU plan into the ConfigMap, its status mapper reads the
``phase`` another controller would write into it."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import kaiwo_ctrl.workloads.kinds as kinds_pkg
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS
from kaiwo_ctrl.workloads.base.childstatus import COMPLETE, NEW, RUNNING, STARTING
from kaiwo_ctrl.workloads.reconcile.desired import desired_pairs
from kaiwo_ctrl.workloads.observe.drift import immutable_drift
from kaiwo_ctrl.workloads.kinds import (
    CHILD_KINDS,
    WORKLOAD_KINDS,
    ChildSpec,
    Paths,
    child_resources,
    workload_kinds,
)
from kaiwo_ctrl.workloads.kinds import batchjob
from kaiwo_ctrl.workloads.base.observed import ObservedChildren
from kaiwo_ctrl.workloads.builders.plan import WorkloadPlan
from kaiwo_ctrl.workloads.observe.status import observe
from kaiwo_ctrl.workloads.base.world import World

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
NODES = [{"metadata": {"name": f"g{i}", "labels": {"kaiwo/nodepool": "amd-mi300x-8gpu-96core-1024gi"}},
          "status": {"allocatable": {"amd.com/gpu": "8"}}} for i in range(2)]
WORLD = World.from_dicts(nodes=NODES, queue_config={"clusterQueues": [{"name": "kaiwo"}]})
ADMITTED = [{"status": {"conditions": [{"type": "Admitted", "status": "True"}]}}]


# --------------------------------------------------------------------------- the toy kind's folder
def build_toy(p: WorkloadPlan) -> dict[str, Any]:  # build.py
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": p.o.child_metadata(p.o.object_labels()),
        "data": {"replicas": str(p.gpu.replicas), "gpusPerReplica": str(p.gpu.gpus_per_replica)},
    }


_PHASES = {"done": COMPLETE, "running": RUNNING}


def toy_status(children: ObservedChildren, previous: str) -> str:  # status.py
    if children.main is None:
        return NEW
    return _PHASES.get((children.main.get("data") or {}).get("phase", ""), STARTING)


TOY = ChildSpec(  # __init__.py: the table entry
    CONFIGMAPS, build=build_toy, status=toy_status, paths=Paths(immutable=("data.replicas",)),
    ray=False, main=True, terminate=True,
)

# --------------------------------------------------------------------------- its registry line
REGISTRY = tuple(line for line in CHILD_KINDS if line[1] is not batchjob.CHILD) + (("KaiwoJob", TOY),)
KINDS = workload_kinds(REGISTRY)
WK = KINDS["KaiwoJob"]


def kaiwojob(**spec) -> dict:
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "toy", "namespace": "ns", "uid": "u-1", "generation": 1},
            "spec": {"image": "busybox", **spec}}


def test_the_registered_kind_is_the_kaiwojobs_main_object_and_built_from_the_plan():
    raw = kaiwojob(gpus=12)
    pairs = desired_pairs(WorkloadPlan.of(raw, WORLD), kind=WK, download_succeeded=True)
    assert isinstance(pairs, list)
    ((spec, child),) = pairs
    assert spec is TOY and WK.main_child(False) is TOY
    assert (child["kind"], child["metadata"]["name"]) == ("ConfigMap", "toy")
    assert child["data"] == {"replicas": "2", "gpusPerReplica": "6"}  # 12 GPUs over nodes of 8
    (ref,) = child["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("KaiwoJob", "u-1", True)


@pytest.mark.parametrize(("data", "workloads", "expected"), [
    (None, None, "PENDING"),  # not there yet: waits for admission
    ({}, None, "PENDING"),
    ({}, ADMITTED, "STARTING"),
    ({"phase": "running"}, ADMITTED, "RUNNING"),
    ({"phase": "done"}, None, "COMPLETE"),
])
def test_its_status_mapper_drives_the_kaiwojob_status(data, workloads, expected):
    raw = kaiwojob()
    plan = WorkloadPlan.of(raw, WORLD)
    objects = [] if data is None else [{"kind": "ConfigMap", "metadata": {"name": "toy"}, "data": data}]
    children = WK.observed(raw, objects)
    assert (children.main is not None) == (data is not None)
    status = observe(WK, raw, WORLD, children, workloads, NOW, plan=plan)
    assert status["status"] == expected


def test_the_generic_machinery_reads_its_entry():
    assert child_resources(KINDS.values())["ConfigMap"] is CONFIGMAPS
    assert TOY in WK.termination_order()
    existing = {"kind": "ConfigMap", "data": {"replicas": "1"}}
    assert immutable_drift(TOY, existing, {"kind": "ConfigMap", "data": {"replicas": "2"}}) == ["data.replicas"]
    # the shipped tables are untouched: a KaiwoJob's non-Ray main object is still a batch Job
    assert WORKLOAD_KINDS["KaiwoJob"].main_child(False) is batchjob.CHILD
    assert KINDS["KaiwoService"].children == WORKLOAD_KINDS["KaiwoService"].children


def test_the_shipped_kinds_are_one_folder_and_one_registry_line_each():
    root = Path(kinds_pkg.__file__).parent
    folders = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == {"batchjob", "rayjob", "deployment", "rayservice", "appwrapper"}
    for name in folders:
        entry = __import__(f"kaiwo_ctrl.workloads.kinds.{name}", fromlist=["CHILD"]).CHILD
        assert [c for _, c in CHILD_KINDS].count(entry) == 1, name
