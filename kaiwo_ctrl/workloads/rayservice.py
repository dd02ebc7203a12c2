"""The RayService of a Ray KaiwoService, wrapped in an AppWrapper."""

from __future__ import annotations

from typing import Any

from .gpu import GpuPlan
from .kaiwoobject import KaiwoObject
from .labels import queue_labels
from .podtemplate import expect_mapping
from .raycluster import check_ray_cluster, decorate_ray_cluster, default_ray_cluster
from .storage import StoragePlan
from .world import World

APPWRAPPER_API_VERSION = "workload.codeflare.dev/v1beta2"
HEAD_PODSET_PATH = "template.spec.rayClusterConfig.headGroupSpec.template"
WORKER_PODSET_PATH = "template.spec.rayClusterConfig.workerGroupSpecs[{index}].template"


def build_ray_service(obj: KaiwoObject, world: World, gpu: GpuPlan, storage: StoragePlan) -> dict[str, Any]:
    """The RayService manifest (not created directly; it goes into the AppWrapper)."""
    user = obj.user_spec
    if user is not None:
        spec: dict[str, Any] = dict(expect_mapping(user.get("spec"), "spec.rayService.spec"))
        if spec.get("rayClusterConfig") is None:
            spec["rayClusterConfig"] = default_ray_cluster(obj, world)
        check_ray_cluster(spec, "rayClusterConfig", "spec.rayService.spec.rayClusterConfig")
    else:
        spec = {"rayClusterConfig": default_ray_cluster(obj, world)}
    if obj.spec.get("serveConfigV2"):
        spec["serveConfigV2"] = obj.spec["serveConfigV2"]
    cluster = decorate_ray_cluster(spec["rayClusterConfig"], obj, world, gpu, storage)
    labels = dict(cluster["headGroupSpec"]["template"]["metadata"]["labels"])
    labels.update(obj.object_labels())
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": obj.name, "namespace": obj.namespace, "labels": labels},
        "spec": spec,
    }


def build_appwrapper(obj: KaiwoObject, world: World, gpu: GpuPlan, storage: StoragePlan) -> dict[str, Any]:
    ray_service = build_ray_service(obj, world, gpu, storage)
    labels = queue_labels(obj.queue_name(world.settings), obj.priority_class)
    labels.update(obj.object_labels())
    pod_sets = [{"replicas": 1, "path": HEAD_PODSET_PATH}]
    # The reference declared only the first worker group; a user RayService with
    # several worker groups had the others run outside Kueue's accounting.
    # Every worker group is declared here.
    for index, group in enumerate(ray_service["spec"]["rayClusterConfig"].get("workerGroupSpecs") or []):
        pod_sets.append({"replicas": group.get("replicas", gpu.replicas), "path": WORKER_PODSET_PATH.format(index=index)})
    return {
        "apiVersion": APPWRAPPER_API_VERSION,
        "kind": "AppWrapper",
        "metadata": obj.child_metadata(labels),
        # The AppWrapper API's JSON name is ``podSets`` (Go field DeclaredPodSets);
        # any other key is pruned by the API server and Kueue then sees no pod set.
        "spec": {"components": [{"podSets": pod_sets, "template": ray_service}]},
    }
