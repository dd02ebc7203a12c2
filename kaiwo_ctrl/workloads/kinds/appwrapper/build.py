"""Builder: the AppWrapper of a Ray KaiwoService, wrapping its RayService
(Kueue admits the AppWrapper; the AppWrapper controller creates the RayService)."""

from __future__ import annotations

from typing import Any

from ...base.labels import queue_labels
from ...builders.plan import WorkloadPlan
from ..rayservice.build import build_ray_service

APPWRAPPER_API_VERSION = "workload.codeflare.dev/v1beta2"
HEAD_PODSET_PATH = "template.spec.rayClusterConfig.headGroupSpec.template"
WORKER_PODSET_PATH = "template.spec.rayClusterConfig.workerGroupSpecs[{index}].template"


def build_appwrapper(p: WorkloadPlan) -> dict[str, Any]:
    obj, gpu = p.o, p.gpu
    ray_service = build_ray_service(p)
    labels = queue_labels(p.queue, obj.priority_class)
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
