import pytest

from kaiwo_ctrl.queues.kueue import (
    desired_kueue_objects,
    order_resources,
    translate_cluster_queue_spec,
)

LABELS = {"app.kubernetes.io/managed-by": "kaiwo-ctrl", "kaiwo.silogen.ai/queue-config": "kaiwo"}
QC_OWNER = {
    "apiVersion": "kaiwo.silogen.ai/v1alpha1",
    "kind": "KaiwoQueueConfig",
    "name": "kaiwo",
    "uid": "qc-uid",
    "controller": True,
    "blockOwnerDeletion": True,
}


# --------------------------------------------------------------------------- translation


@pytest.mark.parametrize(
    "v1beta1,v1beta2",
    [
        ({"cohort": "team"}, {"cohortName": "team"}),
        ({"cohortName": "team"}, {"cohortName": "team"}),
        ({"cohort": "team", "cohortName": "team"}, {"cohortName": "team"}),
        ({"cohort": ""}, {}),
        ({"cohort": None, "queueingStrategy": "StrictFIFO"}, {"queueingStrategy": "StrictFIFO"}),
        (
            {"admissionChecks": ["prov", "check2"]},
            {"admissionChecksStrategy": {"admissionChecks": [{"name": "prov"}, {"name": "check2"}]}},
        ),
        ({"admissionChecks": []}, {}),
        (
            {"admissionChecksStrategy": {"admissionChecks": [{"name": "a", "onFlavors": ["f"]}]}},
            {"admissionChecksStrategy": {"admissionChecks": [{"name": "a", "onFlavors": ["f"]}]}},
        ),
        (
            {"flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"}},
            {"flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"}},
        ),
        (
            {"flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}},
            {"flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}},
        ),
        (
            {
                "preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "LowerPriority"}},
                "fairSharing": {"weight": "2"},
                "stopPolicy": "Hold",
                "namespaceSelector": {"matchLabels": {"team": "a"}},
            },
            {
                "preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "LowerPriority"}},
                "fairSharing": {"weight": "2"},
                "stopPolicy": "Hold",
                "namespaceSelector": {"matchLabels": {"team": "a"}},
            },
        ),
    ],
)
def test_translate_cluster_queue_spec(v1beta1, v1beta2):
    before = repr(v1beta1)
    spec, problems = translate_cluster_queue_spec(v1beta1)
    assert problems == []
    assert spec == v1beta2
    assert repr(v1beta1) == before


@pytest.mark.parametrize(
    "v1beta1,problem",
    [
        ({"cohort": "a", "cohortName": "b"}, "cohort: 'a' conflicts with cohortName 'b'; set only one"),
        (
            {"admissionChecks": ["x"], "admissionChecksStrategy": {"admissionChecks": [{"name": "y"}]}},
            "admissionChecks: cannot be used together with admissionChecksStrategy",
        ),
        ({"cohrt": "typo"}, "cohrt: unknown field, not part of the Kueue v1beta2 ClusterQueue spec"),
        (
            {"preemption": {"withinCohort": "Any"}},
            "preemption.withinCohort: unknown field, not part of the Kueue v1beta2 ClusterQueue spec",
        ),
        (
            {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [
                {"name": "cpu", "nominalQuota": 1, "quota": 2}]}]}]},
            "resourceGroups[0].flavors[0].resources[0].quota: unknown field, not part of the Kueue v1beta2 "
            "ClusterQueue spec",
        ),
    ],
)
def test_translate_reports_what_would_be_dropped(v1beta1, problem):
    _, problems = translate_cluster_queue_spec(v1beta1)
    assert problems == [problem]


def test_order_resources_follows_covered_and_drops_uncovered():
    spec = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "amd.com/gpu"],
                "flavors": [
                    {
                        "name": "f",
                        "resources": [
                            {"name": "amd.com/gpu", "nominalQuota": 8},
                            {"name": "ephemeral-storage", "nominalQuota": "1Ti"},
                            {"name": "memory", "nominalQuota": "1Gi"},
                            {"name": "cpu", "nominalQuota": 4},
                        ],
                    }
                ],
            }
        ]
    }
    out = order_resources(spec)
    assert [r["name"] for r in out["resourceGroups"][0]["flavors"][0]["resources"]] == [
        "cpu",
        "memory",
        "amd.com/gpu",
    ]
    assert len(spec["resourceGroups"][0]["flavors"][0]["resources"]) == 4  # input untouched


# --------------------------------------------------------------------------- desired objects


def queue_config(spec, uid="qc-uid"):
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoQueueConfig",
            "metadata": {"name": "kaiwo", "uid": uid}, "spec": spec}


SPEC = {
    "resourceFlavors": [
        {"name": "gpu-pool", "nodeLabels": {"kaiwo/nodepool": "gpu-pool"}, "topologyName": "default-topology",
         "taints": [{"key": "k", "effect": "NoSchedule"}]},
        {"name": "plain", "nodeLabels": {"pool": "plain"}},
    ],
    "clusterQueues": [
        {
            "name": "team-a",
            "namespaces": ["ns2", "ns1", "ns1"],
            "spec": {
                "cohort": "kaiwo",
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [{"name": "plain", "resources": [
                            {"name": "memory", "nominalQuota": "10Gi"}, {"name": "cpu", "nominalQuota": 4}]}],
                    }
                ],
            },
        },
        {"name": "shared", "spec": {"namespaceSelector": {}}},
    ],
    "workloadPriorityClasses": [{"metadata": {"name": "high"}, "value": 1000, "description": "urgent"}],
    "topologies": [{"metadata": {"name": "default-topology"}, "spec": {"levels": [
        {"nodeLabel": "kaiwo/topology-block"}, {"nodeLabel": "kubernetes.io/hostname"}]}}],
}


def by_key(objects):
    return {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}


def test_desired_objects_full_conversion():
    state = desired_kueue_objects(queue_config(SPEC), cluster_queue_uids={"team-a": "cq-uid"})
    assert state.problems == []
    objs = by_key(state.objects)
    assert [o["kind"] for o in state.objects] == [
        "Topology", "ResourceFlavor", "ResourceFlavor", "WorkloadPriorityClass",
        "ClusterQueue", "ClusterQueue", "LocalQueue", "LocalQueue",
    ]
    for obj in state.objects:
        assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert obj["metadata"]["labels"] == LABELS

    rf = objs[("ResourceFlavor", None, "gpu-pool")]
    assert rf["spec"] == {"nodeLabels": {"kaiwo/nodepool": "gpu-pool"}, "topologyName": "default-topology"}
    assert rf["metadata"]["ownerReferences"] == [QC_OWNER]
    plain = objs[("ResourceFlavor", None, "plain")]
    assert plain["spec"] == {"nodeLabels": {"pool": "plain"}, "topologyName": "default-topology"}

    cq = objs[("ClusterQueue", None, "team-a")]
    assert cq["metadata"]["ownerReferences"] == [QC_OWNER]
    assert cq["spec"]["cohortName"] == "kaiwo" and "cohort" not in cq["spec"]
    assert [r["name"] for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]] == ["cpu", "memory"]

    lq = objs[("LocalQueue", "ns1", "team-a")]
    assert lq["spec"] == {"clusterQueue": "team-a"}
    assert lq["metadata"]["ownerReferences"] == [{
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "name": "team-a", "uid": "cq-uid",
        "controller": True, "blockOwnerDeletion": True}]
    assert ("LocalQueue", "ns2", "team-a") in objs

    wpc = objs[("WorkloadPriorityClass", None, "high")]
    assert (wpc["value"], wpc["description"]) == (1000, "urgent")
    topo = objs[("Topology", None, "default-topology")]
    assert topo["spec"]["levels"] == [{"nodeLabel": "kaiwo/topology-block"}, {"nodeLabel": "kubernetes.io/hostname"}]

    # LocalQueues of a queue without namespaces are never touched by the sync
    assert ("LocalQueue", None, "shared") in state.hold


def test_local_queues_wait_for_their_cluster_queue():
    state = desired_kueue_objects(queue_config(SPEC))
    assert not [o for o in state.objects if o["kind"] == "LocalQueue"]
    assert sorted(o["metadata"]["namespace"] for o in state.waiting) == ["ns1", "ns2"]
    assert ("LocalQueue", "ns1", "team-a") in state.hold


def test_spec_only_input_has_no_owner_refs():
    state = desired_kueue_objects(SPEC)
    assert all("ownerReferences" not in o["metadata"] for o in state.objects)


def test_bad_items_are_left_out_and_held():
    spec = {
        "resourceFlavors": [{"name": "ok", "nodeLabels": {"a": "b"}}],
        "clusterQueues": [
            {"name": "good", "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": "ok", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}]}},
            {"name": "bad", "namespaces": ["ns"], "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": "missing", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}]}},
        ],
    }
    state = desired_kueue_objects(queue_config(spec), cluster_queue_uids={"bad": "u"})
    names = {(o["kind"], o["metadata"]["name"]) for o in state.objects}
    assert ("ClusterQueue", "good") in names and ("ResourceFlavor", "ok") in names
    assert ("ClusterQueue", "bad") not in names and ("LocalQueue", "bad") not in names
    assert ("ClusterQueue", None, "bad") in state.hold
    assert ("LocalQueue", None, "bad") in state.hold
    assert [str(p) for p in state.problems] == [
        "spec.clusterQueues[1].spec.resourceGroups[0].flavors[0].name: "
        "flavor 'missing' is not defined in spec.resourceFlavors"
    ]


def test_accepts_model_like_object():
    class Model:
        def to_k8s(self):
            return queue_config(SPEC)

    assert len(desired_kueue_objects(Model(), {"team-a": "u"}).objects) == 8


def test_translate_drops_nested_nulls_and_reports_wrong_types():
    spec, problems = translate_cluster_queue_spec(
        {"preemption": {"reclaimWithinCohort": None, "withinClusterQueue": "LowerPriority"}, "cohort": None}
    )
    assert (spec, problems) == ({"preemption": {"withinClusterQueue": "LowerPriority"}}, [])
    _, problems = translate_cluster_queue_spec(
        {"cohort": 3, "admissionChecks": "x", "stopPolicy": 1, "resourceGroups": {"a": 1},
         "preemption": {"borrowWithinCohort": {"maxPriorityThreshold": "high"}}}
    )
    assert problems == [
        "cohort: must be a string",
        "admissionChecks: must be a list of strings",
        "stopPolicy: must be a string",
        "resourceGroups: must be a list",
        "preemption.borrowWithinCohort.maxPriorityThreshold: must be an integer",
    ]
    assert translate_cluster_queue_spec("oops") == ({}, ["spec: must be an object"])
