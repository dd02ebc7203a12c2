"""Ray cluster construction and decoration shared by RayJob and RayService."""

from __future__ import annotations

from typing import Any

from ..base.gpu import GpuPlan
from ..base.kaiwoobject import KaiwoObject
from ..base.world import World
from .podtemplate import (
    PodRole,
    check_pod_template,
    decorate_pod_template,
    default_pod_template,
    expect_mapping,
    expect_objects,
    mapping_at,
)
from .storage import StoragePlan

DEFAULT_WORKER_GROUP = "default-worker-group"


def default_ray_cluster(obj: KaiwoObject, world: World) -> dict[str, Any]:
    scheduler = world.settings.kube_scheduler_name
    return {
        "enableInTreeAutoscaling": False,
        "headGroupSpec": {
            "rayStartParams": {"dashboard-host": "0.0.0.0"},
            "template": default_pod_template(
                "ray-head", scheduler_name=scheduler, dshm_size="1Gi", dangerous=obj.dangerous
            ),
        },
        "workerGroupSpecs": [
            {
                "groupName": DEFAULT_WORKER_GROUP,
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 1,
                "rayStartParams": {},
                "template": default_pod_template(
                    "ray-worker", scheduler_name=scheduler, dshm_size="200Gi", dangerous=obj.dangerous
                ),
            }
        ],
    }


def ray_spec(obj: KaiwoObject, world: World, kind: str, cluster_key: str) -> dict[str, Any] | None:
    """The user's ``spec.<kind>.spec`` (a copy) with its Ray cluster at ``cluster_key``
    defaulted and checked; None when the user gave no ``spec.<kind>``."""
    user = obj.user_spec
    if user is None:
        return None
    spec: dict[str, Any] = dict(expect_mapping(user.get("spec"), f"spec.{kind}.spec"))
    if spec.get(cluster_key) is None:
        spec[cluster_key] = default_ray_cluster(obj, world)
    check_ray_cluster(spec, cluster_key, f"spec.{kind}.spec.{cluster_key}")
    return spec


def check_ray_cluster(parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    """Check the shape of the Ray cluster at ``parent[key]`` (the user's
    ``rayClusterSpec``/``rayClusterConfig``); raises FieldError naming the field."""
    cluster = mapping_at(parent, key, path)
    for i, group in enumerate(expect_objects(cluster.get("workerGroupSpecs"), f"{path}.workerGroupSpecs")):
        group["template"] = check_pod_template(group.get("template"), f"{path}.workerGroupSpecs[{i}].template")
    head = mapping_at(cluster, "headGroupSpec", f"{path}.headGroupSpec")
    head["template"] = check_pod_template(head.get("template"), f"{path}.headGroupSpec.template")
    return cluster


def decorate_ray_cluster(
    cluster: dict[str, Any],
    obj: KaiwoObject,
    world: World,
    gpu: GpuPlan,
    storage: StoragePlan,
    head_extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Decorate every worker group and the head in place: pod decoration and
    replica counts, the head's memory and no GPUs, and the default Ray image.
    The caller checked the cluster's shape (:func:`check_ray_cluster`)."""
    for group in cluster.get("workerGroupSpecs") or []:
        group.setdefault("template", {})
        decorate_pod_template(
            group["template"], obj, world, storage, PodRole(plan=gpu, gpus_per_pod=gpu.gpus_per_replica)
        )
        group["replicas"] = group["minReplicas"] = group["maxReplicas"] = gpu.replicas
    head = cluster.setdefault("headGroupSpec", {})
    head.setdefault("template", {})
    decorate_pod_template(
        head["template"],
        obj,
        world,
        storage,
        PodRole(plan=gpu, gpus_per_pod=0, head_memory=world.settings.head_pod_memory, extra_labels=head_extra_labels),
    )
    return cluster
