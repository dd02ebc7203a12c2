"""Models under Kueue: their server Pods are admitted by Kueue's pod integration.

A Model opts in with Kueue's own label ``kueue.x-k8s.io/queue-name`` (naming
the LocalQueue, which Kaiwo names after its ClusterQueue), with the annotation
``kaiwo.silogen.ai/cluster-queue`` naming a ClusterQueue, or through
``KaiwoConfig.spec.models.clusterQueue`` for every Model that names none. A
Model's ``kueue.x-k8s.io/priority-class`` label (a WorkloadPriorityClass) is
copied to its Pods, so Models and KaiwoJobs compete by the same priorities.

What the pod integration needs from us is only the queue label on each Pod:
Kueue's webhook then adds the scheduling gate ``kueue.x-k8s.io/admission``,
the label ``kueue.x-k8s.io/managed`` and its finalizer, and makes one Workload
per Pod (a Pod without ``kueue.x-k8s.io/pod-group-name`` is a group of one,
which is what a single-Pod replica is). On admission it removes the gate and
injects the flavor's node selector; on preemption it deletes the Pod, and the
rollout plan creates a replacement, gated again until quota returns.

Kueue's gate is added only by its webhook, so a Pod the webhook does not take
(the pod integration off, the namespace not selected, the webhook down with
``failurePolicy: Ignore``) would run outside any quota. So the operator gates
every Model Pod under Kueue itself with :data:`OPERATOR_GATE` and removes it only
once Kueue admitted the Pod (Kueue's gate gone, the Pod's own Workload
``Admitted``): a Pod Kueue does not manage stays gated, and the Model's
``QuotaReserved`` says why.

Where a KaiwoQueueConfig exists, a Model whose Pods request GPUs and that names
no queue goes under the default ClusterQueue (``KaiwoConfig.spec.models.clusterQueue``,
else ``spec.defaultClusterQueueName``) unless ``spec.models.gpuModelsUnderKueue``
is false.

The LocalQueue is ensured the way KaiwoJobs ensure theirs
(:func:`kaiwo_ctrl.queues.localqueue.resolve_local_queue`), under the same
namespace rules.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.kinds import CLUSTERQUEUES, KAIWOQUEUECONFIGS, LOCALQUEUES, WORKLOADS
from kaiwo_ctrl.queues.constants import QUEUE_CONFIG_NAME
from kaiwo_ctrl.queues.localqueue import create_local_queue, resolve_local_queue
from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import PODS
from kaiwo_ctrl.runtime.observe.conditions import find_condition
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.settings import settings_for

LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
ANNOTATION_CLUSTER_QUEUE = "kaiwo.silogen.ai/cluster-queue"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
#: The operator's own gate on Model Pods under Kueue, removed once Kueue admitted the Pod.
OPERATOR_GATE = "kaiwo.silogen.ai/kueue-admission"
#: Kueue's pod webhook marks each Pod it manages with this label ("true").
LABEL_MANAGED = "kueue.x-k8s.io/managed"
IDX_OWNER_POD = "owner-pod"
#: Workload uids whose preemption was already reported as an event (bounded).
PREEMPTED_MEMORY = 4096


def model_queue(model: Mapping[str, Any], default: str | None) -> str | None:
    """The queue of the Model's Pods, or None when it runs outside Kueue."""
    meta = model.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return labels.get(LABEL_QUEUE_NAME) or annotations.get(ANNOTATION_CLUSTER_QUEUE) or default or None


def queue_labels(model: Mapping[str, Any], queue: str) -> dict[str, str]:
    """The Kueue labels of the Model's server Pods."""
    out = {LABEL_QUEUE_NAME: queue}
    priority = ((model.get("metadata") or {}).get("labels") or {}).get(LABEL_PRIORITY_CLASS)
    if priority:
        out[LABEL_PRIORITY_CLASS] = priority
    return out


def _gates(pod: Mapping[str, Any]) -> set[str]:
    return {str(g.get("name")) for g in (pod.get("spec") or {}).get("schedulingGates") or ()}


def is_gated(pod: Mapping[str, Any]) -> bool:
    """Kueue has not admitted the Pod yet (its or the operator's admission gate is still on)."""
    return bool(_gates(pod) & {ADMISSION_GATE, OPERATOR_GATE})


def requests_gpus(pod: Mapping[str, Any]) -> bool:
    """Some container of the Pod asks for a ``*/gpu`` resource (nvidia.com/gpu, amd.com/gpu)."""
    spec = pod.get("spec") or {}
    for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            if any(k.endswith("/gpu") and str(v) not in ("0", "") for k, v in (res.get(part) or {}).items()):
                return True
    return False


def admitted(wl: Mapping[str, Any] | None) -> bool:
    cond = find_condition(((wl or {}).get("status") or {}).get("conditions") or [], "Admitted") or {}
    return cond.get("status") == "True"


def index_owner_pod(wl: Mapping[str, Any]) -> list[str]:
    """``<namespace>/<pod>`` of the Pod a Workload was made for."""
    meta = wl.get("metadata") or {}
    return [
        f"{meta.get('namespace')}/{r.get('name')}"
        for r in meta.get("ownerReferences") or ()
        if r.get("kind") == "Pod" and r.get("apiVersion") == "v1"
    ]


def pending(wl: Mapping[str, Any] | None) -> bool:
    """Kueue tried the Workload and found no quota for it."""
    cond = find_condition(((wl or {}).get("status") or {}).get("conditions") or [], "QuotaReserved") or {}
    return cond.get("status") == "False" and cond.get("reason") == "Pending"


@dataclass(frozen=True)
class Quota:
    """What the QuotaReserved condition says; ``preempted``: Workloads evicted by preemption."""

    status: str
    reason: str
    message: str
    waiting: int = 0
    preempted: tuple[tuple[str, str], ...] = ()  # (workload uid, Kueue's message)


def quota(pods: list[dict[str, Any]], workload_of: Any) -> Quota:
    """QuotaReserved from the Pods' Workloads: False with Kueue's message while any
    live Pod waits for admission (pure; ``workload_of(pod)`` reads the cache)."""
    waiting: list[str] = []
    preempted: list[tuple[str, str]] = []
    unmanaged = 0
    for pod in pods:
        wl = workload_of(pod)
        evicted = find_condition(((wl or {}).get("status") or {}).get("conditions") or [], "Evicted")
        if evicted and evicted.get("status") == "True" and evicted.get("reason") == "Preempted":
            preempted.append(((wl or {}).get("metadata", {}).get("uid", ""), str(evicted.get("message") or "")))
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if (pod["metadata"].get("labels") or {}).get(LABEL_MANAGED) != "true":
            unmanaged += 1
        if not is_gated(pod):
            continue
        reserved = find_condition(((wl or {}).get("status") or {}).get("conditions") or [], "QuotaReserved")
        waiting.append(str((reserved or {}).get("message") or "waiting for Kueue to create the Workload"))
    if unmanaged:
        # the queue label is on, yet Kueue's webhook did not take the Pod: the operator's gate holds it
        msg = (f"{unmanaged} server Pod(s) not managed by Kueue stay gated ({OPERATOR_GATE}): enable the pod "
               "integration in Kueue's Configuration (integrations.frameworks) and let its webhooks select this namespace")
        return Quota("Unknown", "NotManagedByKueue", msg, 0, tuple(preempted))
    if waiting:
        msg = f"{len(waiting)} replica(s) wait for quota: {waiting[0]}"
        return Quota("False", "Pending", msg, len(waiting), tuple(preempted))
    return Quota("True", "QuotaReserved", "every replica is admitted", 0, tuple(preempted))


class KueueAdmission:
    """The caches and writes the Model controller needs for Kueue (one per reconciler)."""

    def __init__(self, mgr: Manager) -> None:
        self.settings = settings_for(mgr)
        self.workloads = mgr.cache.informer(WORKLOADS, indexers={IDX_OWNER_POD: index_owner_pod})
        self.local_queues = mgr.cache.informer(LOCALQUEUES)
        self.cluster_queues = mgr.cache.informer(CLUSTERQUEUES)
        self.queue_configs = mgr.cache.informer(KAIWOQUEUECONFIGS)
        self._reported: OrderedDict[str, None] = OrderedDict()

    def default_queue(self) -> str | None:
        spec = (self.settings.raw() or {}).get("spec") or {}
        return (spec.get("models") or {}).get("clusterQueue") or None

    def queue_of(self, model: Mapping[str, Any]) -> str | None:
        return model_queue(model, self.default_queue())

    def gpu_queue(self) -> str | None:
        """The queue of a GPU Model that names none: the default ClusterQueue where a
        KaiwoQueueConfig exists, unless the admin opted out."""
        if self.queue_configs.get(QUEUE_CONFIG_NAME) is None:
            return None
        spec = (self.settings.raw() or {}).get("spec") or {}
        if (spec.get("models") or {}).get("gpuModelsUnderKueue") is False:
            return None
        return self.default_queue() or spec.get("defaultClusterQueueName") or "kaiwo"

    def to_ungate(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Pods still under the operator's gate that Kueue admitted: its own gate gone
        and the Workload it made for this very Pod (owner uid) ``Admitted``."""
        out = []
        for pod in pods:
            gates = _gates(pod)
            if OPERATOR_GATE not in gates or ADMISSION_GATE in gates or pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod["metadata"].get("labels") or {}).get(LABEL_MANAGED) != "true":
                continue
            wl = self.workload_of(pod)
            owners = ((wl or {}).get("metadata") or {}).get("ownerReferences") or ()
            if admitted(wl) and any(r.get("uid") == pod["metadata"].get("uid") for r in owners):
                out.append(pod)
        return out

    def workload_of(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        meta = pod.get("metadata") or {}
        wls = self.workloads.by_index(IDX_OWNER_POD, f"{meta.get('namespace')}/{meta.get('name')}")
        return wls[0] if wls else None

    def blocked(self, pods: list[dict[str, Any]]) -> frozenset[str]:
        """Gated Pods whose Workload Kueue left pending for quota."""
        return frozenset(p["metadata"]["name"] for p in pods if is_gated(p) and pending(self.workload_of(p)))

    def quota(self, pods: list[dict[str, Any]]) -> Quota:
        return quota(pods, self.workload_of)

    async def ungate(self, client: Client, pods: list[dict[str, Any]]) -> list[str]:
        """Remove the operator's gate from the Pods Kueue admitted (guarded by
        resourceVersion); the names of those ungated."""
        done = []
        for pod in self.to_ungate(pods):
            meta = pod["metadata"]
            gates = [g for g in pod["spec"].get("schedulingGates") or () if g.get("name") != OPERATOR_GATE]
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {"schedulingGates": gates or None}}
            try:
                await client.patch(PODS, meta["name"], patch, meta.get("namespace"))
            except ApiError as e:
                if not (e.conflict or e.not_found):
                    raise
                continue  # the Pod's next event brings the Model back
            done.append(meta["name"])
        return done

    async def ensure_local_queue(self, client: Client, namespace: str, queue: str) -> tuple[str | None, str | None]:
        """(error, created LocalQueue name): the error names why the queue cannot be used."""
        if self.local_queues.get(queue, namespace) is not None:
            return None, None
        decision = resolve_local_queue(
            namespace, queue, self.queue_configs.get(QUEUE_CONFIG_NAME),
            local_queue_exists=False, cluster_queue=self.cluster_queues.get(queue),
        )
        if decision.action == "error":
            return decision.message, None
        if decision.action == "create" and decision.local_queue is not None:
            created = await create_local_queue(client, decision.local_queue)
            return None, (queue if created is not None else None)
        return None, None

    def new_preemptions(self, q: Quota) -> list[str]:
        """Kueue's messages for preemptions not reported before."""
        out = []
        for uid, message in q.preempted:
            if uid and uid not in self._reported:
                self._reported[uid] = None
                out.append(message)
                while len(self._reported) > PREEMPTED_MEMORY:
                    self._reported.popitem(last=False)
        return out
