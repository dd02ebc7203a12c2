"""Builder: the RayService of a Ray KaiwoService (the AppWrapper carries it)."""

from __future__ import annotations

from typing import Any

from ...builders.plan import WorkloadPlan
from ...builders.raycluster import decorate_ray_cluster, default_ray_cluster, ray_spec


def build_ray_service(p: WorkloadPlan) -> dict[str, Any]:
    """The RayService manifest (not created directly; it goes into the AppWrapper)."""
    obj, world, gpu, storage = p.o, p.world, p.gpu, p.storage
    spec = ray_spec(obj, world, "rayService", "rayClusterConfig")
    if spec is None:
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
