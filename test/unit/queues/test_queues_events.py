import pytest

from kaiwo_ctrl.queues.events import sync_event

RF = {"kind": "ResourceFlavor", "metadata": {"name": "foo"}}
LQ = {"kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ns"}}


@pytest.mark.parametrize(
    "action,obj,error,expected",
    [
        ("Create", RF, None, ("Normal", "KaiwoQueueConfigResourceFlavorCreated", "created resource flavor /foo")),
        ("Delete", LQ, None, ("Normal", "KaiwoQueueConfigLocalQueueDeleted", "deleted local queue ns/q")),
        (
            "Update",
            {"kind": "ClusterQueue", "metadata": {"name": "kaiwo"}},
            None,
            ("Normal", "KaiwoQueueConfigClusterQueueUpdated", "updated cluster queue /kaiwo"),
        ),
        (
            "Create",
            LQ,
            'namespaces "ns" not found',
            ("Warning", "KaiwoQueueConfigLocalQueueCreateFailed",
             'Failed to create local queue ns/q: namespaces "ns" not found'),
        ),
        (
            "Delete",
            {"kind": "Topology", "metadata": {"name": "t"}},
            "boom",
            ("Warning", "KaiwoQueueConfigTopologyDeleteFailed", "Failed to delete topology /t: boom"),
        ),
        (
            "OwnerReference",
            {"kind": "WorkloadPriorityClass", "metadata": {"name": "p"}},
            "x",
            ("Warning", "KaiwoQueueConfigWorkloadPriorityClassOwnerReferenceFailed",
             "Failed to set owner reference on workload priority class /p: x"),
        ),
    ],
)
def test_sync_event(action, obj, error, expected):
    event = sync_event(action, obj, error)
    assert (event.type, event.reason, event.message) == expected


def test_unknown_action_rejected():
    with pytest.raises(ValueError):
        sync_event("Patch", RF)


def test_get_success_has_no_event():
    with pytest.raises(ValueError):
        sync_event("Get", RF)
