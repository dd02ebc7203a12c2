import copy

from kaiwo_ctrl.queues.kueue import desired_kueue_objects
from kaiwo_ctrl.queues.plan import object_key, plan_sync

OURS = {"app.kubernetes.io/managed-by": "kaiwo-ctrl", "kaiwo.silogen.ai/queue-config": "kaiwo"}

SPEC = {
    "resourceFlavors": [{"name": "f", "nodeLabels": {"kaiwo/nodepool": "f"}, "topologyName": "default-topology"}],
    "clusterQueues": [
        {
            "name": "q",
            "namespaces": ["ns1"],
            "spec": {
                "cohort": "kaiwo",
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [{"name": "f", "resources": [
                            {"name": "cpu", "nominalQuota": "4"}, {"name": "memory", "nominalQuota": "1Gi"}]}],
                    }
                ],
            },
        }
    ],
    "workloadPriorityClasses": [{"metadata": {"name": "high"}, "value": 100}],
    "topologies": [{"metadata": {"name": "default-topology"}, "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}}],
}
QC = {"metadata": {"name": "kaiwo", "uid": "qc-uid"}, "spec": SPEC}


def desired(spec=SPEC):
    return desired_kueue_objects({"metadata": {"name": "kaiwo", "uid": "qc-uid"}, "spec": spec}, {"q": "cq-uid"})


def as_stored(objs):
    """Simulate what the apiserver returns: defaults filled in, resourceVersion, uid, quantities re-rendered."""
    out = []
    for i, o in enumerate(copy.deepcopy(objs)):
        o["metadata"]["resourceVersion"] = str(100 + i)
        o["metadata"]["uid"] = f"uid-{i}"
        o["metadata"].setdefault("finalizers", ["kueue.x-k8s.io/resource-in-use"])
        if o["kind"] == "ClusterQueue":
            s = o["spec"]
            s["queueingStrategy"] = "BestEffortFIFO"
            s["stopPolicy"] = "None"
            s["flavorFungibility"] = {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"}
            s["preemption"] = {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never",
                               "borrowWithinCohort": {"policy": "Never"}}
            res = s["resourceGroups"][0]["flavors"][0]["resources"]
            res[0]["nominalQuota"] = 4  # "4" stored as int by another writer
            res[1]["nominalQuota"] = "1073741824"
        if o["kind"] == "LocalQueue":
            o["spec"]["stopPolicy"] = "None"
        o["status"] = {"anything": True}
        out.append(o)
    return out


def test_identical_cluster_plans_nothing():
    state = desired()
    plan = plan_sync(state.objects, as_stored(state.objects), state.hold)
    assert plan.empty, plan.describe()


def test_existing_as_mapping_by_kind():
    state = desired()
    stored = as_stored(state.objects)
    by_kind = {}
    for o in stored:
        kind = o.pop("kind")
        by_kind.setdefault(kind, []).append(o)
    assert plan_sync(state.objects, by_kind, state.hold).empty


def test_empty_cluster_creates_in_dependency_order():
    state = desired()
    plan = plan_sync(state.objects, [], state.hold)
    assert [o["kind"] for o in plan.creates] == [
        "Topology", "ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue"]
    assert not plan.updates and not plan.deletes


def test_hand_made_objects_are_never_deleted_and_stale_managed_ones_are():
    state = desired()
    stored = as_stored(state.objects)
    hand_made = [
        {"kind": "ResourceFlavor", "metadata": {"name": "admin-flavor"}, "spec": {}},
        {"kind": "ClusterQueue", "metadata": {"name": "admin-cq", "labels": {"team": "x"}}, "spec": {}},
        {"kind": "LocalQueue", "metadata": {"name": "admin-lq", "namespace": "ns1"}, "spec": {"clusterQueue": "q"}},
        {"kind": "Topology", "metadata": {"name": "admin-topo",
                                          "labels": {"app.kubernetes.io/managed-by": "someone-else"}}},
        # managed by us but for another queue config name: not ours to delete
        {"kind": "WorkloadPriorityClass", "metadata": {"name": "other", "labels": {
            "app.kubernetes.io/managed-by": "kaiwo-ctrl", "kaiwo.silogen.ai/queue-config": "other"}}, "value": 1},
    ]
    stale = [
        {"kind": "ResourceFlavor", "metadata": {"name": "old-flavor", "labels": OURS}, "spec": {}},
        {"kind": "ClusterQueue", "metadata": {"name": "old-cq", "labels": OURS}, "spec": {}},
        {"kind": "LocalQueue", "metadata": {"name": "q", "namespace": "dropped-ns", "labels": OURS},
         "spec": {"clusterQueue": "q"}},
        {"kind": "WorkloadPriorityClass", "metadata": {"name": "old-wpc", "labels": OURS}, "value": 5},
        {"kind": "Topology", "metadata": {"name": "old-topo", "labels": OURS}, "spec": {"levels": []}},
    ]
    plan = plan_sync(state.objects, stored + hand_made + stale, state.hold)
    assert not plan.creates and not plan.updates
    assert [object_key(o) for o in plan.deletes] == [
        ("LocalQueue", "dropped-ns", "q"),
        ("ClusterQueue", None, "old-cq"),
        ("WorkloadPriorityClass", None, "old-wpc"),
        ("ResourceFlavor", None, "old-flavor"),
        ("Topology", None, "old-topo"),
    ]
    assert plan.reasons[("ClusterQueue", None, "old-cq")] == "no longer listed in the queue config"


def test_held_objects_are_neither_updated_nor_deleted():
    # cluster queue "q" now references an undefined flavor: it and its LocalQueues stay as they are
    good = desired()
    stored = as_stored(good.objects)
    broken = copy.deepcopy(SPEC)
    broken["clusterQueues"][0]["spec"]["resourceGroups"][0]["flavors"][0]["name"] = "nope"
    state = desired(broken)
    assert state.problems
    plan = plan_sync(state.objects, stored, state.hold)
    assert plan.empty, plan.describe()


def test_local_queues_of_queue_without_namespaces_untouched():
    spec = copy.deepcopy(SPEC)
    spec["clusterQueues"][0]["namespaces"] = []
    state = desired(spec)
    helper_lq = {"kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ns1", "labels": OURS},
                 "spec": {"clusterQueue": "q"}}
    stored = [o for o in as_stored(desired().objects) if o["kind"] != "LocalQueue"] + [helper_lq]
    assert plan_sync(state.objects, stored, state.hold).empty


def test_spec_change_updates_existing_object_in_place():
    state = desired()
    stored = as_stored(state.objects)
    spec = copy.deepcopy(SPEC)
    spec["clusterQueues"][0]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "8"
    spec["workloadPriorityClasses"][0]["value"] = 200
    new = desired(spec)
    plan = plan_sync(new.objects, stored, new.hold)
    assert [object_key(o) for o in plan.updates] == [
        ("WorkloadPriorityClass", None, "high"), ("ClusterQueue", None, "q")]
    wpc, cq = plan.updates
    assert wpc["value"] == 200
    assert cq["metadata"]["resourceVersion"] == next(
        o for o in stored if o["kind"] == "ClusterQueue")["metadata"]["resourceVersion"]
    assert cq["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "8"
    assert cq["spec"]["cohortName"] == "kaiwo"
    assert plan.reasons[("ClusterQueue", None, "q")] == "spec differs"


def test_removed_field_is_detected():
    spec = copy.deepcopy(SPEC)
    spec["clusterQueues"][0]["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    with_preemption = as_stored(desired(spec).objects)
    for o in with_preemption:
        if o["kind"] == "ClusterQueue":
            o["spec"]["preemption"]["withinClusterQueue"] = "LowerPriority"
    state = desired()
    plan = plan_sync(state.objects, with_preemption, state.hold)
    assert [object_key(o) for o in plan.updates] == [("ClusterQueue", None, "q")]


def test_hand_made_object_with_listed_name_is_adopted():
    state = desired()
    stored = as_stored(state.objects)
    for o in stored:
        if o["kind"] == "WorkloadPriorityClass":
            o["metadata"]["labels"] = {"team": "x"}
            o["metadata"].pop("ownerReferences")
    plan = plan_sync(state.objects, stored, state.hold)
    (update,) = plan.updates
    assert update["metadata"]["labels"] == {"team": "x", **OURS}
    # an adopted object gets no owner reference: deleting the queue config
    # must never garbage-collect something an admin made by hand
    assert "ownerReferences" not in update["metadata"]
    assert update["metadata"]["annotations"]["kaiwo.silogen.ai/adopted"] == "true"
    assert plan.reasons[object_key(update)] == "labels differs"
    # once adopted, a second plan over the updated object is empty
    stored = [update if object_key(o) == object_key(update) else o for o in stored]
    assert plan_sync(state.objects, stored, state.hold).empty


def test_adopting_object_with_other_controller_leaves_its_owner_alone():
    state = desired()
    stored = as_stored(state.objects)
    other = {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "x-uid", "controller": True}
    for o in stored:
        if o["kind"] == "WorkloadPriorityClass":
            o["metadata"]["ownerReferences"] = [other]
            o["metadata"]["labels"] = {}
    (update,) = plan_sync(state.objects, stored, state.hold).updates
    assert update["metadata"]["ownerReferences"] == [other]


def _immutable_spec_change():
    spec = copy.deepcopy(SPEC)
    spec["topologies"][0]["spec"]["levels"] = [{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]
    spec["resourceFlavors"][0]["nodeLabels"] = {"kaiwo/nodepool": "f", "extra": "1"}
    return desired(spec)


def test_immutable_changes_of_unused_objects_plan_recreate():
    stored = [o for o in as_stored(desired().objects) if o["kind"] in ("Topology", "WorkloadPriorityClass")]
    stored += [o for o in as_stored(desired().objects) if o["kind"] == "ResourceFlavor"]  # no ClusterQueue lists f
    new = _immutable_spec_change()
    plan = plan_sync([o for o in new.objects if o["kind"] == "ResourceFlavor"], stored, new.hold)
    assert [object_key(o) for o in plan.recreates] == [("ResourceFlavor", None, "f")]
    unused_topology = [o for o in stored if o["kind"] == "Topology"]  # no ResourceFlavor names it
    plan = plan_sync([o for o in new.objects if o["kind"] == "Topology"], unused_topology, new.hold)
    assert [object_key(o) for o in plan.recreates] == [("Topology", None, "default-topology")]
    assert not plan.updates and not plan.deletes and not plan.conflicts


def test_immutable_change_of_an_object_in_use_is_reported_not_recreated():
    """Kueue's resource-in-use finalizer would keep a deleted flavor (or topology) while
    a ClusterQueue (or flavor) uses it: no delete, and the status names object and field."""
    stored = as_stored(desired().objects)
    new = _immutable_spec_change()
    plan = plan_sync(new.objects, stored, new.hold)
    assert plan.empty and not plan.recreates and not plan.blocked
    assert [object_key(o) for o in plan.conflicts] == [("Topology", None, "default-topology"),
                                                       ("ResourceFlavor", None, "f")]
    assert plan.out_of_sync() == [
        "Topology default-topology: levels changed (immutable): not re-created while ResourceFlavor f uses it "
        "(stop using it, or delete it, to apply the change)",
        "ResourceFlavor f: nodeLabels changed (immutable once topologyName is set): not re-created while "
        "ClusterQueue q uses it (stop using it, or delete it, to apply the change)",
    ]
    # users being deleted no longer count; many users are summarised
    for o in stored:
        if o["kind"] == "ClusterQueue":
            o["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    plan = plan_sync(new.objects, stored, new.hold)
    assert ("ResourceFlavor", None, "f") in [object_key(o) for o in plan.recreates]
    users = [{"kind": "ClusterQueue", "metadata": {"name": f"cq{i}"},
              "spec": {"resourceGroups": [{"flavors": [{"name": "f"}]}]}} for i in range(5)]
    plan = plan_sync(new.objects, stored + users, new.hold)
    assert "while ClusterQueue cq0, ClusterQueue cq1, ClusterQueue cq2 and 2 more use it" in plan.reasons[("ResourceFlavor", None, "f")]


def test_flavor_is_the_same_with_or_without_a_named_default_topology():
    """The sample's entry (no topologyName) and the start-up task's entry of the same
    name (topologyName default-topology) must not plan a change to each other."""
    sample = copy.deepcopy(SPEC)
    del sample["resourceFlavors"][0]["topologyName"]
    stored = as_stored(desired(sample).objects)
    assert plan_sync(desired().objects, stored, desired().hold).empty
    bare = copy.deepcopy(SPEC)
    bare["resourceFlavors"] = [{"name": "f"}, {"name": "g", "topologyName": "default-topology"}]
    flavors = [o["spec"] for o in desired(bare).objects if o["kind"] == "ResourceFlavor"]
    assert flavors == [{"nodeLabels": {"kaiwo/worker": "true"}, "topologyName": "default-topology"}] * 2


def test_flavor_without_topology_updates_in_place():
    spec = copy.deepcopy(SPEC)
    state = desired(spec)
    stored = as_stored(state.objects)
    for o in stored:
        if o["kind"] == "ResourceFlavor":
            o["spec"] = {"nodeLabels": {"old": "x"}}  # hand-edited, no topologyName: mutable
    plan = plan_sync(state.objects, stored, state.hold)
    assert [object_key(o) for o in plan.updates] == [("ResourceFlavor", None, "f")]
    assert plan.updates[0]["spec"] == {"nodeLabels": {"kaiwo/nodepool": "f"}, "topologyName": "default-topology"}


def test_describe_lists_actions():
    state = desired()
    lines = plan_sync(state.objects, [], state.hold).describe()
    assert lines[0] == "create Topology default-topology: missing"
    assert "create LocalQueue ns1/q: missing" in lines


def test_existing_read_as_v1beta1_compares_equal():
    state = desired()
    stored = as_stored(state.objects)
    for o in stored:
        if o["kind"] == "ClusterQueue":
            o["apiVersion"] = "kueue.x-k8s.io/v1beta1"
            o["spec"]["cohort"] = o["spec"].pop("cohortName")
    assert plan_sync(state.objects, stored, state.hold).empty


def test_terminating_objects_block_instead_of_being_rewritten():
    state = desired()
    stored = as_stored(state.objects)
    for o in stored:
        if o["kind"] == "ResourceFlavor":
            o["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            o["spec"]["nodeLabels"] = {"changed": "x"}  # would otherwise plan a re-create
    stale = {"kind": "ClusterQueue", "metadata": {"name": "old", "labels": OURS,
                                                  "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}
    plan = plan_sync(state.objects, stored + [stale], state.hold)
    assert plan.empty
    assert [object_key(o) for o in plan.blocked] == [("ResourceFlavor", None, "f")]
    assert plan.out_of_sync() == ["ResourceFlavor f: waiting for the old object to finish deleting"]


def test_no_new_reference_to_a_terminating_object():
    """The queue config was deleted and re-created while garbage collection still
    deletes the old Topology (Kueue's resource-in-use finalizer holds it until no
    ResourceFlavor names it). The old flavors are gone already: creating new ones
    that name the terminating Topology would keep it alive for ever, so they wait,
    and so does a ClusterQueue listing a terminating flavor."""
    state = desired()
    stored = as_stored(state.objects)
    topo = next(o for o in stored if o["kind"] == "Topology")
    topo["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    plan = plan_sync(state.objects, [topo], state.hold)
    created = {object_key(o) for o in plan.creates}
    assert ("ResourceFlavor", None, "f") not in created, plan.describe()
    assert ("ResourceFlavor", None, "f") in {object_key(o) for o in plan.blocked}
    assert "ResourceFlavor f: waiting for Topology default-topology to finish deleting" in "\n".join(plan.out_of_sync())
    assert ("ClusterQueue", None, "q") in created  # its flavor does not exist: nothing terminating is named
    assert ("WorkloadPriorityClass", None, "high") in created

    flavor = next(o for o in stored if o["kind"] == "ResourceFlavor")
    flavor["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    plan = plan_sync(state.objects, [topo, flavor], state.hold)
    assert ("ClusterQueue", None, "q") not in {object_key(o) for o in plan.creates}, plan.describe()
    assert "ClusterQueue q: waiting for ResourceFlavor f to finish deleting" in plan.out_of_sync()

    # a ClusterQueue that already lists the terminating flavor adds no reference: updated as usual
    cq = next(o for o in stored if o["kind"] == "ClusterQueue")
    cq["spec"]["cohortName"] = "other"
    plan = plan_sync(state.objects, [topo, flavor, cq], state.hold)
    assert ("ClusterQueue", None, "q") in {object_key(o) for o in plan.updates}, plan.describe()

    # once the Topology is gone the flavor is created
    plan = plan_sync(state.objects, [], state.hold)
    assert ("ResourceFlavor", None, "f") in {object_key(o) for o in plan.creates}


def test_entry_metadata_labels_and_annotations_are_kept_and_synced():
    spec = copy.deepcopy(SPEC)
    spec["workloadPriorityClasses"][0]["metadata"] = {
        "name": "high", "labels": {"team": "a", "app.kubernetes.io/managed-by": "someone"},
        "annotations": {"note": "x"}}
    state = desired(spec)
    wpc = next(o for o in state.objects if o["kind"] == "WorkloadPriorityClass")
    assert wpc["metadata"]["labels"] == {"team": "a", **OURS}  # ownership labels cannot be overridden
    assert wpc["metadata"]["annotations"] == {"note": "x"}
    stored = as_stored(state.objects)
    assert plan_sync(state.objects, stored, state.hold).empty
    for o in stored:
        if o["kind"] == "WorkloadPriorityClass":
            o["metadata"]["annotations"] = {"note": "old", "other": "kept"}
    (update,) = plan_sync(state.objects, stored, state.hold).updates
    assert update["metadata"]["annotations"] == {"note": "x", "other": "kept"}
