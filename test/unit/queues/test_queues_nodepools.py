import pytest

from kaiwo_ctrl.queues.defaults import (
    covered_resources,
    default_cluster_queue,
    default_queue_config_spec,
    default_topology,
    format_bytes,
    merge_queue_config_spec,
)
from kaiwo_ctrl.queues.nodepools import (
    clean_amd_model,
    clean_nvidia_model,
    discover,
    flavor_specs,
    node_patches,
    profile_node,
    topology_label_patches,
)


def node(name, cpu="8", memory="16Gi", labels=None, unschedulable=False, taints=None, rv="1"):
    obj = {
        "metadata": {"name": name, "labels": dict(labels or {}), "resourceVersion": rv},
        "spec": {},
        "status": {"capacity": {"cpu": cpu, "memory": memory}},
    }
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    if taints is not None:
        obj["spec"]["taints"] = taints
    return obj


K80 = {"nvidia.com/gpu.product": "Tesla-K80", "nvidia.com/gpu.count": "8"}
MI300 = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "beta.amd.com/gpu.family.AI": "8"}


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("AMD_Instinct_MI300X_OAM", "mi300x"),
        ("AMD Instinct MI250X", "mi250x"),
        ("Radeon_Pro_W7900_Series", "prow7900"),
        ("AMD-Instinct-MI300X", "mi300x"),
        ("AMD_GPU", "unknown"),
    ],
)
def test_clean_amd_model(raw, expected):
    assert clean_amd_model(raw) == expected


@pytest.mark.parametrize(
    "raw,expected",
    [("Tesla-K80", "teslak80"), ("NVIDIA-A100-SXM4-40GB", "nvidiaa100sxm440gb"), ("H100", "h100")],
)
def test_clean_nvidia_model(raw, expected):
    assert clean_nvidia_model(raw) == expected


@pytest.mark.parametrize(
    "labels,cpu,memory,flavor",
    [
        ({}, "8", "16Gi", "cpu-only-0gpu-7core-14gi"),
        ({}, "7500m", "16384Mi", "cpu-only-0gpu-7core-14gi"),  # 7.5 cores -> 8 -> 7
        ({}, "4", "8Gi", "cpu-only-0gpu-3core-7gi"),
        (K80, "16", "64Gi", "nvidia-teslak80-8gpu-14core-57gi"),
        (MI300, "128", "1Ti", "amd-mi300x-8gpu-115core-921gi"),
        # product label without a count label: vendor stays cpu, model is taken
        ({"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}, "8", "16Gi", "cpu-mi300x-0gpu-7core-14gi"),
        # NVIDIA wins over AMD
        ({**MI300, **K80}, "8", "16Gi", "nvidia-teslak80-8gpu-7core-14gi"),
        # unparseable count ignored
        ({"nvidia.com/gpu.product": "Tesla-K80", "nvidia.com/gpu.count": "x"}, "8", "16Gi", "cpu-teslak80-0gpu-7core-14gi"),
        # memory not a whole Gi: floor
        ({}, "2", "16383Mi", "cpu-only-0gpu-1core-13gi"),
    ],
)
def test_flavor_names(labels, cpu, memory, flavor):
    assert profile_node(node("n", cpu, memory, labels)).flavor_name == flavor


def test_nominal_values_are_exact():
    prof = profile_node(node("n", "8", "16Gi"))
    assert prof.nominal_cpu == 7
    assert prof.nominal_memory == (16 * 9 * 2**30) // 10  # floor(16 * 0.9 * 2^30)


def kind_cluster(cordon=()):
    nodes = [node("cpu-0", "8", "16Gi")]
    for i in range(4):
        nodes.append(node(f"gpu-{i}", "16", "64Gi", K80, unschedulable=f"gpu-{i}" in cordon))
    return nodes


def test_discover_kind_cluster_quota():
    pools = discover(kind_cluster())
    assert [p.name for p in pools] == ["cpu-only-0gpu-7core-14gi", "nvidia-teslak80-8gpu-14core-57gi"]
    gpu = pools[1]
    assert gpu.nodes == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert gpu.quota["nvidia.com/gpu"] == 32
    assert gpu.quota["cpu"] == 56
    assert "nvidia.com/gpu" not in pools[0].quota


def test_cordoned_node_leaves_pool():
    pools = discover(kind_cluster(cordon=("gpu-2",)))
    assert pools[1].quota["nvidia.com/gpu"] == 24
    assert "gpu-2" not in pools[1].nodes


@pytest.mark.parametrize(
    "label,exclude,in_pool",
    [
        ("node-role.kubernetes.io/control-plane", True, False),
        ("node-role.kubernetes.io/master", True, False),
        ("node-role.kubernetes.io/control-plane", False, True),
        (None, True, True),
    ],
)
def test_control_plane_exclusion(label, exclude, in_pool):
    labels = {label: ""} if label else {}
    pools = discover([node("cp", labels=labels)], exclude_control_plane=exclude)
    assert (pools != []) is in_pool


def test_pool_ordering_cpu_first_then_gpu_count_then_cpu():
    nodes = [
        node("big8", "64", "256Gi", MI300),
        node("small8", "32", "256Gi", MI300),
        node("two", "16", "64Gi", {**MI300, "beta.amd.com/gpu.family.AI": "2"}),
        node("cpu", "4", "8Gi"),
    ]
    assert [p.nodes[0] for p in discover(nodes)] == ["cpu", "two", "small8", "big8"]


def test_flavor_specs():
    assert flavor_specs(discover([node("c")])) == [
        {
            "name": "cpu-only-0gpu-7core-14gi",
            "nodeLabels": {"kaiwo/nodepool": "cpu-only-0gpu-7core-14gi"},
            "topologyName": "default-topology",
        }
    ]


# --------------------------------------------------------------------------- node patches


def test_node_patches_label_and_taint_then_idempotent():
    nodes = kind_cluster()
    pools = discover(nodes)
    config = {"spec": {"nodes": {"addTaintsToGpuNodes": True}}}
    patches = node_patches(pools, nodes, config)
    topology = {"kaiwo/topology-block": "block-a", "kaiwo/topology-rack": "rack-a"}
    assert patches["cpu-0"] == {
        "metadata": {"labels": {"kaiwo/worker": "true", "kaiwo/nodepool": "cpu-only-0gpu-7core-14gi", **topology}}
    }
    gpu = patches["gpu-0"]
    assert gpu["metadata"]["labels"] == {
        "kaiwo/worker": "true",
        "kaiwo/nodepool": "nvidia-teslak80-8gpu-14core-57gi",
        "kaiwo/gpu-model": "teslak80",
        **topology,
    }
    assert gpu["spec"]["taints"] == [{"key": "kaiwo.silogen.ai/gpu", "value": "true", "effect": "NoSchedule"}]
    assert gpu["metadata"]["resourceVersion"] == "1"

    # apply the patches; a second round must be empty (idle cluster -> zero writes)
    for n in nodes:
        p = patches.get(n["metadata"]["name"], {})
        n["metadata"]["labels"].update(p.get("metadata", {}).get("labels", {}))
        if "taints" in p.get("spec", {}):
            n["spec"]["taints"] = p["spec"]["taints"]
    assert node_patches(discover(nodes), nodes, config) == {}


def test_node_patches_keeps_existing_taints_and_custom_key():
    other = {"key": "dedicated", "value": "x", "effect": "NoExecute"}
    nodes = [node("g", labels=K80, taints=[other])]
    config = {"nodes": {"addTaintsToGpuNodes": True, "defaultGpuTaintKey": "gpu"}}
    patch = node_patches(discover(nodes), nodes, config)["g"]
    assert patch["spec"]["taints"] == [other, {"key": "gpu", "value": "true", "effect": "NoSchedule"}]


def test_node_patches_existing_taint_same_key_effect_not_duplicated():
    existing = {"key": "kaiwo.silogen.ai/gpu", "value": "other", "effect": "NoSchedule"}
    labels = {
        **K80,
        "kaiwo/worker": "true",
        "kaiwo/nodepool": "nvidia-teslak80-8gpu-7core-14gi",
        "kaiwo/gpu-model": "teslak80",
        "kaiwo/topology-block": "b1",
        "kaiwo/topology-rack": "r1",
    }
    nodes = [node("g", labels=labels, taints=[existing])]
    assert node_patches(discover(nodes), nodes, {"nodes": {"addTaintsToGpuNodes": True}}) == {}


def test_node_patches_no_taint_by_default_and_never_on_cpu():
    nodes = [node("g", labels=K80), node("c")]
    patches = node_patches(discover(nodes), nodes, None)
    assert "spec" not in patches["g"]
    patches = node_patches(discover(nodes), nodes, {"nodes": {"addTaintsToGpuNodes": True}})
    assert "spec" not in patches["c"] and "kaiwo/gpu-model" not in patches["c"]["metadata"]["labels"]


def test_node_patches_skip_cordoned_nodes():
    nodes = kind_cluster(cordon=("gpu-1",))
    assert "gpu-1" not in node_patches(discover(nodes), nodes, None)


def test_a_node_joining_later_gets_the_start_up_topology_labels_too():
    """Kueue's topology-aware scheduling places pods only on nodes carrying every
    level of the flavor's topology: a late node needs the labels the start-up gave."""
    started = [node("gpu-0", labels={**K80, "kaiwo/topology-block": "b1", "kaiwo/topology-rack": "r1"})]
    late = node("gpu-1", labels=K80)
    nodes = started + [late]
    for n, p in node_patches(discover(started), started, None).items():
        next(x for x in nodes if x["metadata"]["name"] == n)["metadata"]["labels"].update(p["metadata"]["labels"])
    patches = node_patches(discover(nodes), nodes, None)
    assert set(patches) == {"gpu-1"}, "the start-up node keeps its own topology values"
    assert patches["gpu-1"]["metadata"]["labels"] == {
        "kaiwo/worker": "true",
        "kaiwo/nodepool": "nvidia-teslak80-8gpu-7core-14gi",
        "kaiwo/gpu-model": "teslak80",
        "kaiwo/topology-block": "block-a",
        "kaiwo/topology-rack": "rack-a",
    }
    cordoned = node("gpu-2", labels=K80, unschedulable=True)
    assert "gpu-2" not in node_patches(discover(nodes + [cordoned]), nodes + [cordoned], None)


def test_topology_label_patches():
    nodes = [node("a"), node("b", labels={"kaiwo/topology-block": "b1"}), node("c", labels={
        "kaiwo/topology-block": "x", "kaiwo/topology-rack": "y"})]
    assert topology_label_patches(nodes) == {
        "a": {"metadata": {"labels": {"kaiwo/topology-block": "block-a", "kaiwo/topology-rack": "rack-a"}}},
        "b": {"metadata": {"labels": {"kaiwo/topology-rack": "rack-a"}}},
    }


# --------------------------------------------------------------------------- defaults


def _quota(cq, flavor, resource):
    for f in cq["spec"]["resourceGroups"][0]["flavors"]:
        if f["name"] == flavor:
            for r in f["resources"]:
                if r["name"] == resource:
                    return r["nominalQuota"]
    raise KeyError((flavor, resource))


def test_default_cluster_queue_kind_cluster():
    pools = discover(kind_cluster())
    cq = default_cluster_queue(pools, "kaiwo", "kaiwo-cohort")
    assert cq["name"] == "kaiwo"
    assert cq["namespaces"] == []
    assert cq["spec"]["namespaceSelector"] == {}
    assert cq["spec"]["cohort"] == "kaiwo-cohort"
    (group,) = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert [f["name"] for f in group["flavors"]] == ["cpu-only-0gpu-7core-14gi", "nvidia-teslak80-8gpu-14core-57gi"]
    for f in group["flavors"]:
        assert [r["name"] for r in f["resources"]] == group["coveredResources"]
    assert _quota(cq, "nvidia-teslak80-8gpu-14core-57gi", "nvidia.com/gpu") == "32"
    assert _quota(cq, "cpu-only-0gpu-7core-14gi", "nvidia.com/gpu") == "0"
    assert _quota(cq, "cpu-only-0gpu-7core-14gi", "cpu") == "7"
    assert _quota(cq, "cpu-only-0gpu-7core-14gi", "memory") == str((16 * 9 * 2**30) // 10)
    assert _quota(cq, "nvidia-teslak80-8gpu-14core-57gi", "memory") == str(4 * ((64 * 9 * 2**30) // 10))

    cordoned = default_cluster_queue(discover(kind_cluster(cordon=("gpu-3",))), "kaiwo", "kaiwo-cohort")
    assert _quota(cordoned, "nvidia-teslak80-8gpu-14core-57gi", "nvidia.com/gpu") == "24"


def test_covered_resources_mixed_vendors():
    pools = discover([node("a", labels=K80), node("b", labels=MI300), node("c")])
    assert covered_resources(pools) == ["cpu", "memory", "amd.com/gpu", "nvidia.com/gpu"]


def test_default_cluster_queue_without_nodes():
    assert default_cluster_queue([], "kaiwo", "kaiwo")["spec"]["resourceGroups"] == []


@pytest.mark.parametrize(
    "value,text", [(0, "0"), (2**30, "1Gi"), (3 * 2**20, "3Mi"), (3072, "3Ki"), (1536, "1536"), (1000, "1000")]
)
def test_format_bytes(value, text):
    assert format_bytes(value) == text


def test_default_topology():
    assert default_topology() == {
        "metadata": {"name": "default-topology"},
        "spec": {
            "levels": [
                {"nodeLabel": "kaiwo/topology-block"},
                {"nodeLabel": "kaiwo/topology-rack"},
                {"nodeLabel": "kubernetes.io/hostname"},
            ]
        },
    }


# --------------------------------------------------------------------------- merge


def test_default_queue_config_spec_on_create():
    pools = discover(kind_cluster())
    spec = default_queue_config_spec(pools, "kaiwo", "kaiwo")
    assert [cq["name"] for cq in spec["clusterQueues"]] == ["kaiwo"]
    assert [f["name"] for f in spec["resourceFlavors"]] == [p.name for p in pools]
    assert [t["metadata"]["name"] for t in spec["topologies"]] == ["default-topology"]
    assert "workloadPriorityClasses" not in spec


def test_merge_keeps_user_entries_and_replaces_defaults():
    pools = discover(kind_cluster())
    existing = {
        "resourceFlavors": [
            {"name": "user-flavor", "nodeLabels": {"a": "b"}},
            {"name": "nvidia-teslak80-8gpu-14core-57gi", "nodeLabels": {"stale": "x"}},
        ],
        "clusterQueues": [
            {"name": "team-a", "namespaces": ["a"], "spec": {"cohort": "x"}},
            {"name": "kaiwo", "namespaces": ["edited"], "spec": {"cohort": "hand-edit"}},
        ],
        "topologies": [{"metadata": {"name": "custom"}, "spec": {"levels": [{"nodeLabel": "zone"}]}}],
        "workloadPriorityClasses": [{"metadata": {"name": "high"}, "value": 100}],
    }
    before = repr(existing)
    merged = merge_queue_config_spec(existing, pools, "kaiwo", "kaiwo")
    assert repr(existing) == before  # input untouched
    assert [f["name"] for f in merged["resourceFlavors"]] == [
        "user-flavor",
        "nvidia-teslak80-8gpu-14core-57gi",
        "cpu-only-0gpu-7core-14gi",
    ]
    assert merged["resourceFlavors"][1]["nodeLabels"] == {"kaiwo/nodepool": "nvidia-teslak80-8gpu-14core-57gi"}
    assert [cq["name"] for cq in merged["clusterQueues"]] == ["team-a", "kaiwo"]
    assert merged["clusterQueues"][0] == existing["clusterQueues"][0]
    assert merged["clusterQueues"][1] == default_cluster_queue(pools, "kaiwo", "kaiwo")
    assert [t["metadata"]["name"] for t in merged["topologies"]] == ["custom", "default-topology"]
    assert merged["workloadPriorityClasses"] == existing["workloadPriorityClasses"]
    # idempotent: merging again changes nothing
    assert merge_queue_config_spec(merged, pools, "kaiwo", "kaiwo") == merged


def test_merge_accepts_full_object_and_never_removes_flavors():
    first = merge_queue_config_spec({"spec": {}}, discover(kind_cluster()), "kaiwo", "kaiwo")
    # all GPU nodes gone: the GPU flavor stays listed, the queue only has the CPU pool
    second = merge_queue_config_spec({"spec": first}, discover([node("cpu-0")]), "kaiwo", "kaiwo")
    assert [f["name"] for f in second["resourceFlavors"]] == [f["name"] for f in first["resourceFlavors"]]
    flavors = second["clusterQueues"][0]["spec"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in flavors] == ["cpu-only-0gpu-7core-14gi"]


# --------------------------------------------------------------------------- ensure default (one call)

from api.config.v1alpha1 import KaiwoConfig  # noqa: E402
from api.kaiwo.v1alpha1 import KaiwoQueueConfig  # noqa: E402
from kaiwo_ctrl.queues.defaults import ensure_default_queue_config  # noqa: E402


def kaiwo_config(**spec):
    return KaiwoConfig.model_validate({"metadata": {"name": "kaiwo"}, "spec": spec})


def test_ensure_default_creates_when_missing_with_config_names():
    nodes = kind_cluster()
    cfg = kaiwo_config(defaultClusterQueueName="main", defaultClusterQueueCohortName="co",
                       nodes={"addTaintsToGpuNodes": True})
    result = ensure_default_queue_config(None, nodes, cfg)
    assert result.spec is None
    created = result.create
    assert created["apiVersion"] == "kaiwo.silogen.ai/v1alpha1" and created["kind"] == "KaiwoQueueConfig"
    assert created["metadata"] == {"name": "kaiwo"}
    (cq,) = created["spec"]["clusterQueues"]
    assert cq["name"] == "main" and cq["spec"]["cohort"] == "co"
    assert set(result.node_patches) == {"cpu-0", "gpu-0", "gpu-1", "gpu-2", "gpu-3"}
    assert "spec" in result.node_patches["gpu-0"]  # taint requested by the config model
    # the created object is accepted by the typed model
    KaiwoQueueConfig.model_validate(created)


def test_ensure_default_is_a_no_op_on_an_unchanged_cluster():
    nodes = kind_cluster()
    first = ensure_default_queue_config(None, nodes, None)
    stored = KaiwoQueueConfig.model_validate({**first.create, "metadata": {"name": "kaiwo", "uid": "u"}})
    for n in nodes:  # apply node patches
        n["metadata"]["labels"].update(first.node_patches.get(n["metadata"]["name"], {}).get("metadata", {}).get("labels", {}))
    again = ensure_default_queue_config(stored, nodes, None)
    assert again.create is None and again.spec is None and again.node_patches == {}


def test_ensure_default_excludes_control_plane_when_configured():
    nodes = kind_cluster() + [node("cp", "4", "8Gi", {"node-role.kubernetes.io/control-plane": ""})]
    names = lambda r: [p.name for p in r.pools]  # noqa: E731
    assert "cpu-only-0gpu-3core-7gi" in names(ensure_default_queue_config(None, nodes, None))
    cfg = kaiwo_config(nodes={"excludeMasterNodesFromNodePools": True})
    assert "cpu-only-0gpu-3core-7gi" not in names(ensure_default_queue_config(None, nodes, cfg))


def test_ensure_default_dynamic_update_after_cordon():
    nodes = kind_cluster()
    existing = {"metadata": {"name": "kaiwo"}, "spec": ensure_default_queue_config(None, nodes, None).create["spec"]}
    nodes[2]["spec"]["unschedulable"] = True
    result = ensure_default_queue_config(existing, nodes, None)
    assert _quota(result.spec["clusterQueues"][0], "nvidia-teslak80-8gpu-14core-57gi", "nvidia.com/gpu") == "24"
    nodes[2]["spec"]["unschedulable"] = False
    existing = {"metadata": {"name": "kaiwo"}, "spec": result.spec}
    result = ensure_default_queue_config(existing, nodes, None)
    assert _quota(result.spec["clusterQueues"][0], "nvidia-teslak80-8gpu-14core-57gi", "nvidia.com/gpu") == "32"


# ---------------------------------------------------------------------------
# KaiwoConfig spec.defaultTopologyName (upstream Kaiwo #432: default "default-topology")
# ---------------------------------------------------------------------------


def test_kaiwo_config_default_topology_name_defaults_like_upstream():
    assert kaiwo_config().spec.default_topology_name == "default-topology"
    assert kaiwo_config(defaultTopologyName="tas").to_k8s()["spec"]["defaultTopologyName"] == "tas"


@pytest.mark.parametrize(
    "cfg,want",
    [
        (None, "default-topology"),  # no KaiwoConfig fields at all
        ({"spec": {}}, "default-topology"),  # stored before the field existed
        ({"spec": {"defaultTopologyName": ""}}, "default-topology"),  # empty falls back, as upstream
        ({"spec": {"defaultTopologyName": "gpu-tas"}}, "gpu-tas"),
    ],
)
def test_generated_queue_config_uses_default_topology_name(cfg, want):
    result = ensure_default_queue_config(None, kind_cluster(), cfg)
    spec = result.create["spec"]
    assert [t["metadata"]["name"] for t in spec["topologies"]] == [want]
    assert spec["topologies"][0]["spec"]["levels"] == [
        {"nodeLabel": "kaiwo/topology-block"}, {"nodeLabel": "kaiwo/topology-rack"}, {"nodeLabel": "kubernetes.io/hostname"}
    ]
    assert spec["resourceFlavors"] and {f["topologyName"] for f in spec["resourceFlavors"]} == {want}


def test_renamed_default_topology_merges_into_existing_queue_config():
    """Dynamic mode after the admin renames the default topology: the discovered flavors
    move to the new Topology, which is added; the old entry is kept (a user's flavor may
    still name it), and merging again changes nothing."""
    nodes = kind_cluster()
    first = ensure_default_queue_config(None, nodes, None).create["spec"]
    cfg = kaiwo_config(defaultTopologyName="gpu-tas")
    result = ensure_default_queue_config({"spec": first}, nodes, cfg)
    assert [t["metadata"]["name"] for t in result.spec["topologies"]] == ["default-topology", "gpu-tas"]
    assert {f["topologyName"] for f in result.spec["resourceFlavors"]} == {"gpu-tas"}
    assert ensure_default_queue_config({"spec": result.spec}, nodes, cfg).spec is None


@pytest.mark.parametrize("given,default,want", [
    (None, "default-topology", "default-topology"),
    (None, "gpu-tas", "gpu-tas"),
    ("mine", "gpu-tas", "mine"),
])
def test_flavor_without_topology_name_references_the_configured_default(given, default, want):
    from kaiwo_ctrl.queues.kueue import desired_kueue_objects

    entry = {"name": "f", "nodeLabels": {"kaiwo/nodepool": "f"}}
    if given:
        entry["topologyName"] = given
    state = desired_kueue_objects({"resourceFlavors": [entry]}, default_topology=default)
    (flavor,) = [o for o in state.objects if o["kind"] == "ResourceFlavor"]
    assert flavor["spec"]["topologyName"] == want
