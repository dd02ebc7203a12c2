"""Resource template per role and its merge into containers."""

import pytest

from kaiwo_ctrl.workloads.base.resources import (
    apply_to_container,
    apply_to_init_container,
    container_requests_gpu,
    resource_template,
)

GPU = "amd.com/gpu"


def test_worked_example_user_spec():
    spec_resources = {"limits": {"cpu": "150m"}, "requests": {"memory": "100Mi"}}
    container = {"name": "c", "resources": {"limits": {"memory": "125Mi"}, "requests": {"cpu": "125m"}}}
    t = resource_template(spec_resources, gpu_key=GPU, gpus_per_replica=0, generated=False)
    apply_to_container(container, t, GPU)
    assert container["resources"] == {
        "limits": {"cpu": "150m", "memory": "125Mi"},
        "requests": {"cpu": "125m", "memory": "100Mi"},
    }


def test_generated_with_gpus_overrides_cpu_memory_from_spec_resources():
    t = resource_template(
        {"limits": {"cpu": "1", "memory": "1Gi", "amd.com/gpu": "99"}, "requests": {"ephemeral-storage": "5Gi"}},
        gpu_key=GPU,
        gpus_per_replica=2,
        generated=True,
    )
    assert t["limits"] == {"cpu": "8", "memory": "64Gi", GPU: "2"}
    assert t["requests"] == {"cpu": "8", "memory": "64Gi", GPU: "2", "ephemeral-storage": "5Gi"}


def test_user_spec_with_gpus_keeps_spec_resources_and_fills_gaps():
    t = resource_template({"limits": {"cpu": "3"}}, gpu_key=GPU, gpus_per_replica=2, generated=False)
    assert t["limits"] == {"cpu": "3", "memory": "64Gi", GPU: "2"}
    assert t["requests"] == {"cpu": "8", "memory": "64Gi", GPU: "2"}


def test_no_gpus_defaults_two_cpu_16gi_and_drops_gpu_keys():
    t = resource_template(
        {"limits": {"nvidia.com/gpu": "1"}, "requests": {"amd.com/gpu": "1"}},
        gpu_key=GPU,
        gpus_per_replica=0,
        generated=True,
    )
    assert t == {"limits": {"cpu": "2", "memory": "16Gi"}, "requests": {"cpu": "2", "memory": "16Gi"}}


def test_ray_head_role_forces_memory_and_no_gpu():
    t = resource_template({"limits": {"memory": "2Gi"}}, gpu_key=GPU, gpus_per_replica=4, generated=True, head_memory="1Gi")
    assert t == {"limits": {"memory": "1Gi", "cpu": "2"}, "requests": {"memory": "1Gi", "cpu": "2"}}


def test_container_values_win_except_gpu_key():
    c = {"resources": {"limits": {"cpu": "1", GPU: "8"}, "requests": {GPU: "8"}}}
    t = resource_template(None, gpu_key=GPU, gpus_per_replica=2, generated=False)
    apply_to_container(c, t, GPU)
    assert c["resources"]["limits"] == {"cpu": "1", GPU: "2", "memory": "64Gi"}
    assert c["resources"]["requests"][GPU] == "2"


@pytest.mark.parametrize(
    "container,expected",
    [
        # defaulted request 2 above the user's limit 150m -> lowered to the limit
        ({"resources": {"limits": {"cpu": "150m"}}}, {"limits": {"cpu": "150m", "memory": "16Gi"}, "requests": {"cpu": "150m", "memory": "16Gi"}}),
        # user request 4 above the defaulted limit 2 -> limit raised to the request
        ({"resources": {"requests": {"cpu": "4"}}}, {"limits": {"cpu": "4", "memory": "16Gi"}, "requests": {"cpu": "4", "memory": "16Gi"}}),
    ],
)
def test_defaults_never_produce_request_above_limit(container, expected):
    apply_to_container(container, resource_template(None, gpu_key=GPU, gpus_per_replica=0, generated=False), GPU)
    assert container["resources"] == expected


def test_init_container_gets_only_spec_resource_cpu_memory_storage():
    c = {"resources": {"limits": {"cpu": "100m"}}}
    apply_to_init_container(
        c, {"limits": {"cpu": "1", "memory": "1Gi", GPU: "1"}, "requests": {"ephemeral-storage": "1Gi", "foo": "1"}}
    )
    assert c["resources"] == {"limits": {"cpu": "100m", "memory": "1Gi"}, "requests": {"ephemeral-storage": "1Gi"}}
    bare = {}
    apply_to_init_container(bare, None)
    assert bare == {}


def test_container_requests_gpu():
    assert container_requests_gpu({"resources": {"limits": {"nvidia.com/gpu": "1"}}}, GPU)
    assert not container_requests_gpu({"resources": {"limits": {"nvidia.com/gpu": "0"}}}, GPU)
    assert not container_requests_gpu({}, GPU)
