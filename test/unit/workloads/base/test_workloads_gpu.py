"""Cluster GPU stats, replica derivation, Schedulable check, GPU key."""

import pytest

from kaiwo_ctrl.workloads.base.gpu import (
    ClusterGpuStats,
    check_gpus,
    check_queue,
    cluster_gpu_stats,
    derive_gpu_plan,
    gpu_resource_key,
)


def node(pool, alloc=None, key="nvidia.com/gpu", unschedulable=False, name="n"):
    n = {"metadata": {"name": name, "labels": {"kaiwo/nodepool": pool} if pool else {}}, "status": {}}
    if alloc is not None:
        n["status"]["allocatable"] = {key: str(alloc)}
    if unschedulable:
        n["spec"] = {"unschedulable": True}
    return n


NVIDIA_4x8 = [node("nvidia-teslak80-8gpu-28core-200gi", 8, name=f"g{i}") for i in range(4)]


def test_stats_sum_min_and_allocatable():
    nodes = NVIDIA_4x8 + [node("cpu-only-0gpu-7core-14gi"), node(None)]
    s = cluster_gpu_stats(nodes, "nvidia")
    assert (s.total_gpus, s.min_gpus_per_node, s.max_gpus_per_node) == (32, 8, 8)
    assert (s.total_allocatable_gpus, s.min_allocatable_gpus_per_node) == (32, 8)


@pytest.mark.parametrize("vendor", ["nvidia", "NVIDIA", "Nvidia"])
def test_stats_vendor_is_case_insensitive(vendor):
    assert cluster_gpu_stats(NVIDIA_4x8, vendor).total_gpus == 32


def test_stats_other_vendor_sees_nothing():
    s = cluster_gpu_stats(NVIDIA_4x8, "amd")
    assert s.total_gpus == 0 and s.min_gpus_per_node is None


def test_stats_skip_unparseable_zero_and_cordoned_nodes():
    nodes = [
        node("nvidia-x-eightgpu-1core-1gi", 8),
        node("nvidia-x-0gpu-1core-1gi", 0),
        node("nvidia-x-8gpu-1core-1gi", 8, unschedulable=True),
        node("nvidia-x-4gpu-1core-1gi", 0),  # no allocatable: counted, but not in allocatable stats
        node("nvidia-x", 8),
    ]
    s = cluster_gpu_stats(nodes, "nvidia")
    assert (s.total_gpus, s.min_gpus_per_node) == (4, 4)
    assert (s.total_allocatable_gpus, s.min_allocatable_gpus_per_node) == (0, None)


STATS = cluster_gpu_stats(NVIDIA_4x8, "nvidia")


@pytest.mark.parametrize(
    "gpus,replicas,gpr,expected",
    [
        (14, 1, 0, (14, 2, 7)),
        (8, 1, 0, (8, 1, 8)),
        (16, 1, 0, (16, 2, 8)),
        (0, 2, 4, (8, 2, 4)),
        (0, 3, 0, (0, 3, 0)),
        (0, None, 0, (0, 1, 0)),
        (40, 1, 0, (40, 5, 8)),
        # explicit replicas x gpusPerReplica wins over gpus (API reference)
        (10, 2, 4, (8, 2, 4)),
        # explicit but more than the cluster holds: re-derived from node size
        (0, 2, 40, (80, 10, 8)),
    ],
)
def test_derivation_examples(gpus, replicas, gpr, expected):
    p = derive_gpu_plan(gpus, replicas, gpr, STATS)
    assert (p.total_gpus, p.replicas, p.gpus_per_replica) == expected


def test_derivation_prefers_allocatable_minimum_when_it_covers_the_request():
    nodes = [node("amd-mi300x-8gpu-1core-1gi", 4, key="amd.com/gpu", name=f"a{i}") for i in range(4)]
    s = cluster_gpu_stats(nodes, "amd")
    assert (s.min_gpus_per_node, s.min_allocatable_gpus_per_node) == (8, 4)
    p = derive_gpu_plan(8, 1, 0, s)
    assert (p.replicas, p.gpus_per_replica) == (2, 4)  # allocatable 16 >= 8 -> per-node 4
    p = derive_gpu_plan(24, 1, 0, s)
    assert (p.replicas, p.gpus_per_replica) == (3, 8)  # allocatable 16 < 24 -> label count 8


def test_derivation_unknown_cluster_and_no_nodes_gives_one_replica():
    assert derive_gpu_plan(6, 1, 0, None).replicas == 1
    p = derive_gpu_plan(6, 1, 0, ClusterGpuStats("amd"))
    assert (p.total_gpus, p.replicas, p.gpus_per_replica) == (6, 1, 6)


def test_plan_env():
    assert derive_gpu_plan(14, 1, 0, STATS).env() == [
        {"name": "NUM_GPUS", "value": "14"},
        {"name": "NUM_REPLICAS", "value": "2"},
        {"name": "NUM_GPUS_PER_REPLICA", "value": "7"},
    ]


@pytest.mark.parametrize(
    "gpus,replicas,gpr,status,reason",
    [
        (0, 1, 0, True, "Schedulable"),
        (14, 1, 0, True, "Schedulable"),
        (40, 1, 0, False, "InsufficientGPUs"),
        (0, 1, 16, False, "InsufficientGPUsPerNode"),
    ],
)
def test_schedulable_gpu_check(gpus, replicas, gpr, status, reason):
    r = check_gpus(derive_gpu_plan(gpus, replicas, gpr, STATS), STATS)
    assert (r.status, r.reason) == (status, reason)


def test_schedulable_messages():
    r = check_gpus(derive_gpu_plan(40, 1, 0, STATS), STATS)
    assert r.message == "Cluster has 32 GPUs, but requested for 40 GPUs (vendor: nvidia)"
    none = cluster_gpu_stats([], "amd")
    r = check_gpus(derive_gpu_plan(1, 1, 0, none), none)
    assert (r.status, r.reason, r.message) == (False, "NoGPUs", "Cluster has 0 GPUs (vendor: amd)")
    assert check_gpus(derive_gpu_plan(0, 1, 0, none), none).message == "Workload does not require GPU resources"
    assert check_gpus(derive_gpu_plan(8, 1, 0, STATS), STATS).message == "Cluster has sufficient GPU resources"


def test_queue_check():
    qc = {"clusterQueues": [{"name": "kaiwo"}, {"name": "team", "namespaces": ["a", "b"]}]}
    assert check_queue("kaiwo", "x", qc) is None
    assert check_queue("team", "a", qc) is None
    r = check_queue("missing", "x", qc)
    assert (r.reason, r.message) == ("ClusterQueueNotFound", "Cluster queue 'missing' is not defined in KaiwoQueueConfig 'kaiwo'")
    r = check_queue("team", "c", qc)
    assert r.reason == "WrongQueueNamespace"
    assert r.message == (
        "Cluster queue 'team' defines one or more namespaces, but workload namespace 'c' is not one of them"
    )
    assert check_queue("kaiwo", "x", None).reason == "ClusterQueueNotFound"


@pytest.mark.parametrize(
    "vendor,key",
    [("amd", "amd.com/gpu"), ("AMD", "amd.com/gpu"), ("nvidia", "nvidia.com/gpu"), ("NVidia", "nvidia.com/gpu"),
     ("intel", "example.com/gpu"), ("", "example.com/gpu")],
)
def test_gpu_resource_key(vendor, key):
    assert gpu_resource_key(vendor, "example.com/gpu") == key
