"""Builder: the RayJob of a Ray KaiwoJob."""

from __future__ import annotations

from typing import Any

from ...base.labels import queue_labels
from ...builders.plan import WorkloadPlan
from ...builders.podtemplate import normalize_entrypoint
from ...builders.raycluster import decorate_ray_cluster, default_ray_cluster, ray_spec


def build_ray_job(p: WorkloadPlan) -> dict[str, Any]:
    obj, world, gpu, storage = p.o, p.world, p.gpu, p.storage
    spec = ray_spec(obj, world, "rayJob", "rayClusterSpec")
    if spec is None:
        spec = {"shutdownAfterJobFinishes": True, "rayClusterSpec": default_ray_cluster(obj, world)}
    # Same as the batch Job: no retries, whether backoffLimit was > 0 or unset.
    spec["backoffLimit"] = 0
    if obj.entrypoint:
        spec["entrypoint"] = normalize_entrypoint(obj.entrypoint)
    # The head template carries the queue/priority labels too, like every pod template Kaiwo makes.
    q = queue_labels(p.queue, obj.priority_class)
    cluster = decorate_ray_cluster(spec["rayClusterSpec"], obj, world, gpu, storage, head_extra_labels=q)
    labels = dict(cluster["headGroupSpec"]["template"]["metadata"]["labels"])
    labels.update(obj.object_labels())
    labels.update(q)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": obj.child_metadata(labels), "spec": spec}
