"""Where every kind the operator touches lives in the API.

Our own kinds come from their typed API models (``api/...``); Kueue (v1beta2, the storage
version of current Kueue), KubeRay and AppWrapper are declared here. Core
kinds are in :mod:`kaiwo_ctrl.runtime.api.resources`.
"""

from __future__ import annotations

from api.config.v1alpha1 import AIMNamespaceConfig, KaiwoConfig
from api.kaiwo.gpuworkload import GpuWorkload
from api.kaiwo.v1alpha1 import KaiwoJob, KaiwoQueueConfig, KaiwoService
from api.kubeai.v1 import Model
from kaiwo_ctrl.runtime.api.client import Resource


def _of(model) -> Resource:
    return Resource(model.GROUP, model.VERSION, model.PLURAL, model.KIND, model.NAMESPACED)


KAIWOJOBS = _of(KaiwoJob)
KAIWOSERVICES = _of(KaiwoService)
KAIWOQUEUECONFIGS = _of(KaiwoQueueConfig)
KAIWOCONFIGS = _of(KaiwoConfig)
AIMNAMESPACECONFIGS = _of(AIMNamespaceConfig)
MODELS = _of(Model)
GPUWORKLOADS = _of(GpuWorkload)

KUEUE = "kueue.x-k8s.io"
RESOURCEFLAVORS = Resource(KUEUE, "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False)
CLUSTERQUEUES = Resource(KUEUE, "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False)
LOCALQUEUES = Resource(KUEUE, "v1beta2", "localqueues", "LocalQueue")
WORKLOADPRIORITYCLASSES = Resource(KUEUE, "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass", namespaced=False)
TOPOLOGIES = Resource(KUEUE, "v1beta2", "topologies", "Topology", namespaced=False)
WORKLOADS = Resource(KUEUE, "v1beta2", "workloads", "Workload")

RAYJOBS = Resource("ray.io", "v1", "rayjobs", "RayJob")
RAYSERVICES = Resource("ray.io", "v1", "rayservices", "RayService")
RAYCLUSTERS = Resource("ray.io", "v1", "rayclusters", "RayCluster")
APPWRAPPERS = Resource("workload.codeflare.dev", "v1beta2", "appwrappers", "AppWrapper")

#: Gateway API Inference Extension (one pool per Model, opt-in).
INFERENCEPOOLS = Resource("inference.networking.k8s.io", "v1", "inferencepools", "InferencePool")
