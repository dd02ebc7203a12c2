from datetime import datetime, timezone

import pytest

from kaiwo_ctrl.queues.kueue import desired_kueue_objects
from kaiwo_ctrl.queues.localqueue import desired_local_queue, queue_name, resolve_local_queue
from kaiwo_ctrl.queues.plan import plan_sync
from kaiwo_ctrl.queues.status import desired_status, status_changed
from kaiwo_ctrl.queues.validate import validate

CQ_OBJ = {"kind": "ClusterQueue", "metadata": {"name": "kaiwo", "uid": "cq-uid"}, "spec": {}}
QC = {
    "metadata": {"name": "kaiwo"},
    "spec": {
        "clusterQueues": [
            {"name": "kaiwo", "spec": {}},
            {"name": "team", "namespaces": ["a", "b"], "spec": {}},
        ]
    },
}


def test_desired_local_queue_from_object():
    lq = desired_local_queue("ns", CQ_OBJ)
    assert lq == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {
            "name": "kaiwo",
            "namespace": "ns",
            "labels": {"app.kubernetes.io/managed-by": "kaiwo-ctrl"},
            "ownerReferences": [
                {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "name": "kaiwo", "uid": "cq-uid"}
            ],
        },
        "spec": {"clusterQueue": "kaiwo"},
    }


def test_desired_local_queue_from_name():
    lq = desired_local_queue("ns", "q")
    assert lq["spec"] == {"clusterQueue": "q"} and "ownerReferences" not in lq["metadata"]


def test_workload_local_queue_is_never_deleted_by_queue_config_sync():
    lq = desired_local_queue("ns", CQ_OBJ)
    state = desired_kueue_objects({"spec": {}})
    assert plan_sync(state.objects, [lq], state.hold).empty


@pytest.mark.parametrize(
    "workload_queue,config,expected",
    [
        ("mine", {"spec": {"defaultClusterQueueName": "other"}}, "mine"),
        (None, {"spec": {"defaultClusterQueueName": "other"}}, "other"),
        ("", {"defaultClusterQueueName": "spec-only"}, "spec-only"),
        (None, None, "kaiwo"),
    ],
)
def test_queue_name(workload_queue, config, expected):
    assert queue_name(workload_queue, config) == expected


@pytest.mark.parametrize(
    "namespace,queue,exists,cq,action,message",
    [
        ("ns", "kaiwo", True, None, "none", ""),
        ("ns", "kaiwo", False, CQ_OBJ, "create", ""),
        ("ns", "kaiwo", False, None, "error", "cluster queue kaiwo does not exist"),
        ("ns", "unlisted", False, CQ_OBJ, "error", "cluster queue unlisted is not listed in the KaiwoQueueConfig"),
        ("a", "team", False, None, "none", ""),
        (
            "c",
            "team",
            False,
            None,
            "error",
            "cluster queue team defines one or more namespaces, use one of these namespaces to use this cluster queue",
        ),
    ],
)
def test_resolve_local_queue(namespace, queue, exists, cq, action, message):
    decision = resolve_local_queue(namespace, queue, QC, local_queue_exists=exists, cluster_queue=cq)
    assert (decision.action, decision.message) == (action, message)
    if action == "create":
        assert decision.local_queue == desired_local_queue(namespace, cq)
    else:
        assert decision.local_queue is None


def test_resolve_without_queue_config():
    decision = resolve_local_queue("ns", "kaiwo", None, local_queue_exists=False, cluster_queue=CQ_OBJ)
    assert decision.action == "error"


# --------------------------------------------------------------------------- status

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
T1 = datetime(2026, 1, 2, tzinfo=timezone.utc)


def conds(status):
    return {c["type"]: c for c in status["conditions"]}


def test_ready_status():
    status = desired_status(None, generation=3, now=T0)
    assert status["status"] == "READY"
    c = conds(status)
    assert [c[t]["status"] for t in ("Ready", "Valid", "InSync")] == ["True", "True", "True"]
    assert c["Ready"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert c["Ready"]["observedGeneration"] == 3


def test_failed_status_names_items():
    problems = validate({"clusterQueues": [{"name": "q", "spec": {"resourceGroups": [
        {"coveredResources": ["cpu"], "flavors": [{"name": "x", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}]}}]})
    status = desired_status(
        None,
        problems=problems,
        out_of_sync=["LocalQueue ns1/q: create failed: namespaces \"ns1\" not found"],
        now=T0,
    )
    assert status["status"] == "FAILED"
    c = conds(status)
    assert c["Valid"]["status"] == "False" and c["Valid"]["reason"] == "InvalidItems"
    assert "spec.clusterQueues[0].spec.resourceGroups[0].flavors[0].name: flavor 'x' is not defined" in c["Valid"]["message"]
    assert c["InSync"]["reason"] == "OutOfSync"
    assert 'LocalQueue ns1/q: create failed: namespaces "ns1" not found' in c["InSync"]["message"]
    assert c["Ready"]["status"] == "False"


def test_status_is_idempotent_and_keeps_transition_times():
    first = desired_status(None, problems=["spec.x: bad"], now=T0)
    again = desired_status(first, problems=["spec.x: bad"], now=T1)
    assert again == first
    assert not status_changed(first, again)

    fixed = desired_status(first, now=T1)
    assert status_changed(first, fixed)
    c = conds(fixed)
    assert c["Valid"]["lastTransitionTime"] == "2026-01-02T00:00:00Z"
    assert c["InSync"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # stayed True


def test_long_messages_are_truncated():
    status = desired_status(None, out_of_sync=["x" * 40000], now=T0)
    assert len(conds(status)["InSync"]["message"]) <= 32768
