"""Ray cluster construction and decoration shared by RayJob and RayService (§10)."""

from __future__ import annotations

from typing import Any

from .gpu import GpuPlan
from .kaiwoobject import KaiwoObject
from .podtemplate import PodRole, decorate_pod_template, default_pod_template
from .storage import StoragePlan
from .world import World

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


def decorate_ray_cluster(
    cluster: dict[str, Any],
    obj: KaiwoObject,
    world: World,
    gpu: GpuPlan,
    storage: StoragePlan,
    head_extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Decorate every worker group and the head in place (§10 steps 2-4)."""
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
