"""Names, label keys and API versions used by the queue-config code."""

from __future__ import annotations

QUEUE_CONFIG_NAME = "kaiwo"
QUEUE_CONFIG_API_VERSION = "kaiwo.silogen.ai/v1alpha1"
QUEUE_CONFIG_KIND = "KaiwoQueueConfig"

# Ownership markers put on every Kueue object kaiwo-ctrl creates from the queue config.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "kaiwo-ctrl"
QUEUE_CONFIG_LABEL = "kaiwo.silogen.ai/queue-config"
# Put on a hand-made Kueue object the queue config lists (adopted): kaiwo-ctrl keeps it
# in sync but never deletes it, because kaiwo-ctrl did not create it.
ADOPTED_ANNOTATION = "kaiwo.silogen.ai/adopted"

# Kueue. Kueue v0.19 stores and serves every kind we manage at v1beta2
# (Topology included: it is served at v1beta1 (deprecated) and v1beta2, no longer v1alpha1).
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
TOPOLOGY_API_VERSION = KUEUE_API_VERSION

RESOURCE_FLAVOR = "ResourceFlavor"
CLUSTER_QUEUE = "ClusterQueue"
LOCAL_QUEUE = "LocalQueue"
WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"
TOPOLOGY = "Topology"

#: A ClusterQueue flavor's quota fields, each a resource quantity.
QUOTA_FIELDS = ("nominalQuota", "borrowingLimit", "lendingLimit")

#: The top-level ClusterQueue spec fields Kueue's CRD defaults (nested defaults aside).
CLUSTER_QUEUE_SPEC_DEFAULTS = {"queueingStrategy": "BestEffortFIFO", "stopPolicy": "None"}

#: Kind -> plural resource name (for the reconciler's REST paths).
KUEUE_PLURALS = {
    RESOURCE_FLAVOR: "resourceflavors",
    CLUSTER_QUEUE: "clusterqueues",
    LOCAL_QUEUE: "localqueues",
    WORKLOAD_PRIORITY_CLASS: "workloadpriorityclasses",
    TOPOLOGY: "topologies",
}

#: Order in which kinds are created (dependencies first); deletes run in reverse.
KIND_ORDER = (TOPOLOGY, RESOURCE_FLAVOR, WORKLOAD_PRIORITY_CLASS, CLUSTER_QUEUE, LOCAL_QUEUE)

# Node labels and taints (spec section 4).
NODEPOOL_LABEL = "kaiwo/nodepool"
WORKER_LABEL = "kaiwo/worker"
GPU_MODEL_LABEL = "kaiwo/gpu-model"
TOPOLOGY_BLOCK_LABEL = "kaiwo/topology-block"
TOPOLOGY_RACK_LABEL = "kaiwo/topology-rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_TOPOLOGY_BLOCK = "block-a"
DEFAULT_TOPOLOGY_RACK = "rack-a"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")

DEFAULT_TOPOLOGY_NAME = "default-topology"
DEFAULT_GPU_TAINT_KEY = "kaiwo.silogen.ai/gpu"
DEFAULT_CLUSTER_QUEUE_NAME = "kaiwo"
DEFAULT_COHORT_NAME = "kaiwo"

#: The GPU resource names (device plugins). Their one home: workloads, the CLI
#: and the node pools import them from here.
AMD_GPU_RESOURCE = "amd.com/gpu"
NVIDIA_GPU_RESOURCE = "nvidia.com/gpu"

#: Identity of a Kueue object: (kind, namespace or None, name). In a hold set, a
#: namespace of None on a namespaced kind means "in every namespace".
Key = tuple[str, "str | None", str]
