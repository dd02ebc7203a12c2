"""The cached batch Job (workloads/caches.trim_job: managedFields and the
last-applied annotation dropped, the pod template packed) gives every reader
of cached Jobs the same answer as the full object does.

Readers of cached Jobs and what they read:

* status mappers (kinds/batchjob/status.batch_job_status, via observe): status.conditions,
  status.failed/ready/active;
* drift check (drift.immutable_drift): spec.template, spec.selector,
  spec.completionMode, spec.completions; is_controlled_by: ownerReferences;
* child apply (children.writable_part/contains/update_patch): every field the
  builder sets outside the immutable and foreign paths, metadata.resourceVersion;
* indexes, predicates, termination, Kueue lookup: metadata (namespace, name,
  uid, ownerReferences, labels, generation, deletionTimestamp), status;
* map function adopted_job_owner: labels, ownerReferences;
* webhooks: finalizers.stuck (deletionTimestamp, finalizers, ownerReferences),
  the tracking KaiwoJob (the whole Job, through ``unpacked``);
* serving (loader and evict Jobs): annotations, status.conditions,
  deletionTimestamp.
"""

import copy
from datetime import datetime, timezone

import pytest

from kaiwo_ctrl.runtime.cache.informer import strip_managed_fields
from kaiwo_ctrl.runtime.objects.packed import Packed, unpacked
from kaiwo_ctrl.runtime.cache.store import index_by_label, index_by_namespace, index_by_owner_uid
from kaiwo_ctrl.serving.model.cache import LOADER_HASH_ANNOTATION, _loader_hash, job_complete, job_failure
from kaiwo_ctrl.webhooks.finalizers import stuck
from kaiwo_ctrl.webhooks.jobs import FINALIZER, controlled_by_kaiwojob, tracking_kaiwojob
from kaiwo_ctrl.workloads.reconcile.caches import TRANSFORMS, trim_job
from kaiwo_ctrl.workloads.reconcile.children import update_patch, writable_part
from kaiwo_ctrl.workloads.kinds.batchjob.status import batch_job_status
from kaiwo_ctrl.workloads.reconcile.controller import _ChildStatusChanged
from kaiwo_ctrl.workloads.reconcile.desired import desired_children
from kaiwo_ctrl.workloads.observe.drift import immutable_drift, is_controlled_by
from kaiwo_ctrl.workloads.kinds import KAIWOJOB
from kaiwo_ctrl.workloads.kinds.batchjob.watch import adopted_job_owner
from kaiwo_ctrl.workloads.base.observed import ObservedChildren
from kaiwo_ctrl.workloads.observe.status import observe
from kaiwo_ctrl.runtime.objects.apply import contains, differing_paths
from kaiwo_ctrl.workloads.base.world import World

NODES = [{"metadata": {"name": f"g{i}", "labels": {"kaiwo/nodepool": "amd-mi300x-8gpu-64core-1024gi"}},
          "status": {"allocatable": {"amd.com/gpu": "8"}}} for i in range(2)]
WORLD = World.from_dicts(nodes=NODES, queue_config={"clusterQueues": [{"name": "kaiwo"}]})
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
UID, JOB_UID = "uid-j", "8d1c2f0e-0000-4000-8000-000000000001"
MAIN = KAIWOJOB.main_child(False)


def kaiwojob(**spec):
    spec = {"user": "test@amd.com", "image": "busybox:1", "entrypoint": "sleep 1", "gpus": 8, **spec}
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": UID, "generation": 1}, "spec": spec}


def desired(**spec):
    (job,) = desired_children(kaiwojob(**spec), WORLD)
    return job


def stored(job, **status):
    """``job`` as the API server stores it: its defaults, the Job controller's
    labels and selector, managedFields, a last-applied annotation."""
    job = copy.deepcopy(job)
    m = job["metadata"]
    m.update(uid=JOB_UID, resourceVersion="1234", generation=1, creationTimestamp="2026-01-01T12:00:00Z",
             managedFields=[{"manager": "kaiwo-ctrl", "operation": "Update", "fieldsV1": {"f:spec": {}}}])
    m["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}", LOADER_HASH_ANNOTATION: "h1"}
    s = job["spec"]
    s.update(parallelism=1, completions=1, completionMode="NonIndexed", podReplacementPolicy="TerminatingOrFailed",
             selector={"matchLabels": {"batch.kubernetes.io/controller-uid": JOB_UID}})
    t = s["template"]
    t["metadata"]["labels"].update({"batch.kubernetes.io/controller-uid": JOB_UID, "job-name": "j"})
    t["metadata"]["creationTimestamp"] = None
    for c in t["spec"]["containers"]:
        c.update(terminationMessagePath="/dev/termination-log", terminationMessagePolicy="File")
    t["spec"].update(terminationGracePeriodSeconds=30, dnsPolicy="ClusterFirst")
    job["status"] = status
    return job


def trimmed(full):
    out = trim_job(copy.deepcopy(full))
    assert type(out["spec"]["template"]) is Packed
    return out


FULL = stored(desired())
TRIM = trimmed(FULL)
STATUSES = [
    {},
    {"active": 1},
    {"active": 1, "ready": 1, "startTime": "2026-01-01T12:00:05Z"},
    {"failed": 1},
    {"conditions": [{"type": "Suspended", "status": "True"}]},
    {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1},
    {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "m"}]},
]


def test_the_operator_declares_the_job_transform():
    assert TRANSFORMS["Job"] is trim_job


def test_nothing_but_what_the_default_trim_drops_is_lost():
    assert unpacked(TRIM) == strip_managed_fields(copy.deepcopy(FULL))
    assert "managedFields" not in TRIM["metadata"]


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("previous", ["", "PENDING", "RUNNING"])
def test_status_mapper_and_serving_readers_agree(status, previous):
    full = stored(desired(), **status)
    trim = trimmed(full)
    assert batch_job_status(trim, previous) == batch_job_status(full, previous)
    assert job_complete(trim) == job_complete(full)
    assert job_failure(trim) == job_failure(full)
    assert _loader_hash(trim) == _loader_hash(full) == "h1"


@pytest.mark.parametrize("edit", [
    {},  # unchanged
    {"image": "busybox:2"},  # pod template: immutable
    {"entrypoint": "sleep 2"},
    {"env": [{"name": "A", "value": "1"}]},
    {"gpus": 16},
    {"duration": "1h"},
])
def test_drift_and_apply_agree(edit):
    want = desired(**edit)
    assert immutable_drift(MAIN, TRIM, want) == immutable_drift(MAIN, FULL, want)
    body_full, body_trim = writable_part(MAIN, want, FULL), writable_part(MAIN, want, TRIM)
    assert body_trim == body_full
    assert contains(TRIM, body_trim) == contains(FULL, body_full)
    assert differing_paths(TRIM, body_trim) == differing_paths(FULL, body_full)
    assert update_patch(body_trim, TRIM) == update_patch(body_full, FULL)
    assert update_patch(body_trim, TRIM)["metadata"]["resourceVersion"] == "1234"


def test_an_image_edit_is_drift_on_the_trimmed_job_too():
    assert immutable_drift(MAIN, TRIM, desired(image="busybox:2")) == ["spec.template.spec.containers[workload].image"]
    assert immutable_drift(MAIN, TRIM, desired()) == []


@pytest.mark.parametrize("status", STATUSES)
def test_observe_agrees(status):
    full = stored(desired(), **status)
    trim = trimmed(full)
    want = desired(image="busybox:2")
    obj = kaiwojob()

    def run(child):
        children = ObservedChildren(main=child, unapplied_fields=tuple(immutable_drift(MAIN, child, want)))
        return observe("KaiwoJob", obj, WORLD, children, None, T0)

    assert run(trim) == run(full)


def test_metadata_readers_agree():
    deleting = stored(desired())
    deleting["metadata"].update(deletionTimestamp="2026-01-01T12:01:00Z", finalizers=[FINALIZER])
    deleting["metadata"]["ownerReferences"] = []
    adopted = stored(desired())
    adopted["metadata"]["labels"]["kaiwo.silogen.ai/managed"] = "true"
    adopted["metadata"]["ownerReferences"] = []
    label = index_by_label("kaiwo.silogen.ai/run-id")
    for full in (FULL, deleting, adopted):
        trim = trimmed(full)
        assert is_controlled_by(trim, UID) == is_controlled_by(full, UID)
        assert controlled_by_kaiwojob(trim) == controlled_by_kaiwojob(full)
        assert stuck(trim) == stuck(full)
        assert list(adopted_job_owner(trim)) == list(adopted_job_owner(full))
        for index in (index_by_namespace, index_by_owner_uid, label):
            assert index(trim) == index(full)
        assert KAIWOJOB.observed(kaiwojob(), [trim]) == ObservedChildren(main=trim)
    assert stuck(trimmed(deleting)) and list(adopted_job_owner(trimmed(adopted)))


def test_child_predicate_agrees():
    pred = _ChildStatusChanged()
    for a, b in [(STATUSES[0], STATUSES[1]), (STATUSES[1], STATUSES[1]), (STATUSES[2], STATUSES[4])]:
        old, new = stored(desired(), **a), stored(desired(), **b)
        new["metadata"]["resourceVersion"] = "1235"
        assert pred.update(trimmed(old), trimmed(new)) == pred.update(old, new)


def test_tracking_kaiwojob_from_the_cached_job_is_the_full_one():
    adopted = stored(desired())
    adopted["metadata"]["ownerReferences"] = []
    assert tracking_kaiwojob(unpacked(trimmed(adopted)), "u") == tracking_kaiwojob(
        strip_managed_fields(copy.deepcopy(adopted)), "u")
