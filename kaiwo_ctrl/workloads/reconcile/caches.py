"""The informer caches the workload reconcilers read, declared once.

Each cached kind is registered here with its transform and indexes (as
controller-runtime's ``cache.Options.ByObject`` does), so what is trimmed
never depends on which controller asked first: the monitor gets the very
same Pod informer by calling :func:`pod_informer`.

* ConfigMaps are watched cluster-wide for the download ConfigMap: only the
  metadata of those no Kaiwo workload owns is kept (memory).
* Pods are watched only with the ``kaiwo.silogen.ai/run-id`` label, trimmed
  to what maps a pod to its workload and its Kueue Workload.
* Kueue Workloads are trimmed to owner, job-uid label and conditions.
* batch Jobs keep their pod template packed (:func:`trim_job`): only the
  drift check and the Job webhook read it, through ``get_path``, the object
  diff or ``unpacked``; a cached Job takes a third of the memory.
* KaiwoJobs/KaiwoServices carry indexes, so the cluster-wide scans (duration
  candidates, pending GPU demand, preemptable, in ERROR) never parse every
  object.

:class:`SharedCaches` also builds the :class:`~kaiwo_ctrl.workloads.base.world.World` (rebuilt only
after a change) and reads children through the shared read-your-writes
:class:`~kaiwo_ctrl.runtime.control.expectations.Expectations`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kaiwo_ctrl.aim.effective import effective_by_namespace
from kaiwo_ctrl.kinds import AIMNAMESPACECONFIGS, CLUSTERQUEUES, KAIWOQUEUECONFIGS, WORKLOADPRIORITYCLASSES, WORKLOADS
from kaiwo_ctrl.nodes import node_informer
from kaiwo_ctrl.queues.constants import QUEUE_CONFIG_NAME
from kaiwo_ctrl.runtime.api.resources import PODS, PRIORITYCLASSES
from kaiwo_ctrl.runtime.cache.informer import Informer, strip_managed_fields
from kaiwo_ctrl.runtime.cache.store import index_by_label
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta
from kaiwo_ctrl.runtime.objects.objpath import rv as _rv
from kaiwo_ctrl.runtime.objects.packed import Packer, packing
from kaiwo_ctrl.runtime.observe.conditions import find_condition
from kaiwo_ctrl.settings import ConfigMissing, environment, settings_for
from kaiwo_ctrl.settings.priority import priority_policy_for

from ..base.childstatus import ERROR, PENDING, UP
from ..base.labels import LABEL_KUEUE_JOB_UID, LABEL_RUN_ID
from ..base.world import World
from ..kinds import CHILD_RESOURCES, GROUP, OWN_RESOURCES, WORKLOAD_KINDS, WorkloadKind, child_resources
from ..observe.status import PREEMPTABLE

IDX_DURATION_RUNNING = "kaiwo-duration-running"
IDX_PENDING_GPU = "kaiwo-pending-gpu"
IDX_UP_PREEMPTABLE = "kaiwo-up-preemptable"
IDX_ERROR = "kaiwo-error"
IDX_RUN_ID = "kaiwo-run-id"
IDX_JOB_UID = "kueue-job-uid"


class QueueConfigMissing(RuntimeError):
    """KaiwoQueueConfig ``kaiwo`` is not in the cache (retried with backoff)."""


def status_of(obj: Mapping[str, Any]) -> str:
    return ((obj.get("status") or {}).get("status")) or ""
def _idx_duration_running(obj: Mapping[str, Any]) -> list[str]:
    return ["y"] if (obj.get("spec") or {}).get("duration") and status_of(obj) == "RUNNING" else []


def _idx_pending_gpu(obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec") or {}
    try:
        gpus = int(spec.get("gpus") or 0)
    except (TypeError, ValueError):
        gpus = 0
    return ["y"] if status_of(obj) == PENDING and gpus > 0 else []


def terminated_early(obj: Mapping[str, Any]) -> bool:
    """TERMINATED by early termination, whose children are deleted (not a
    stopped RayJob, whose children stay)."""
    cond = find_condition((obj.get("status") or {}).get("conditions"), "WorkloadTerminatedEarly")
    return bool(cond and cond.get("status") == "True")


def _idx_error(obj: Mapping[str, Any]) -> list[str]:
    return ["y"] if status_of(obj) == ERROR else []


def _idx_up_preemptable(obj: Mapping[str, Any]) -> list[str]:
    if status_of(obj) not in UP:
        return []
    cond = find_condition((obj.get("status") or {}).get("conditions"), PREEMPTABLE)
    return ["y"] if cond and cond.get("status") == "True" else []


def trim_pod(obj: dict) -> dict:
    """Pods: only what maps a pod to its workload and its Kueue Workload."""
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences", "deletionTimestamp") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep}


def trim_workload(obj: dict) -> dict:
    """Kueue Workloads: owner, job-uid label and the conditions (admission)."""
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "ownerReferences") if k in meta}
    labels = meta.get("labels") or {}
    if LABEL_KUEUE_JOB_UID in labels:
        keep["labels"] = {LABEL_KUEUE_JOB_UID: labels[LABEL_KUEUE_JOB_UID]}
    out = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep}
    conditions = (obj.get("status") or {}).get("conditions")
    if conditions:
        out["status"] = {"conditions": conditions}
    return out


def _names(objs: Iterable[Mapping[str, Any]]) -> list[str]:
    return [name for o in objs if (name := _meta(o).get("name"))]


def _owned_by_kaiwo(obj: Mapping[str, Any]) -> bool:
    for ref in _meta(obj).get("ownerReferences") or ():
        if ref.get("kind") in OWN_RESOURCES and str(ref.get("apiVersion", "")).startswith(GROUP + "/"):
            return True
    return False


def trim_configmap(obj: dict) -> dict:
    """ConfigMaps are watched cluster-wide for the download ConfigMap: keep
    only the metadata of those no Kaiwo workload owns."""
    strip_managed_fields(obj)
    if _owned_by_kaiwo(obj):
        return obj
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "ownerReferences") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep}


#: What a stored batch Job's pod template typically holds (our builders' output
#: plus the API server's defaults): the preset dictionary packed templates share.
_JOB_TEMPLATE_SAMPLE = {
    "metadata": {
        "creationTimestamp": None,
        "labels": {
            "batch.kubernetes.io/controller-uid": "", "batch.kubernetes.io/job-name": "", "controller-uid": "",
            "job-name": "", "kaiwo.silogen.ai/name": "", "kaiwo.silogen.ai/run-id": "", "kaiwo.silogen.ai/type": "job",
            "kaiwo.silogen.ai/user": "", "kueue.x-k8s.io/queue-name": "kaiwo",
        },
        "annotations": {"kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"},
    },
    "spec": {
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
        "containers": [{
            "name": "workload", "image": "ghcr.io/silogen/rocm-ray:6.4", "command": ["/bin/sh", "-c", "python "],
            "env": [{"name": "NUM_GPUS", "value": "0"}, {"name": "NUM_REPLICAS", "value": "1"},
                    {"name": "NUM_GPUS_PER_REPLICA", "value": "0"}, {"name": "HF_HOME", "value": "/hf_cache"}],
            "resources": {"limits": {"amd.com/gpu": "1", "cpu": "2", "memory": "16Gi"},
                          "requests": {"amd.com/gpu": "1", "cpu": "2", "memory": "16Gi"}},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "data", "mountPath": "/workload"}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "Always",
        }],
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
        "schedulerName": "kaiwo-scheduler",
        "tolerations": [{"key": "kaiwo.silogen.ai/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}
JOB_PACKED_PATHS = ("spec.template",)
trim_job = packing(Packer(_JOB_TEMPLATE_SAMPLE), JOB_PACKED_PATHS, strip_managed_fields)
trim_job.__doc__ = """batch Jobs: managedFields and the last-applied annotation dropped, the pod template packed."""

#: Child kinds cached with a transform of their own (the others: the default trim).
TRANSFORMS = {"ConfigMap": trim_configmap, "Job": trim_job}
_POD_INDEXERS = {IDX_RUN_ID: index_by_label(LABEL_RUN_ID)}


def pod_informer(mgr: Manager) -> Informer:
    """The one Pod informer: pods with a Kaiwo run-id, trimmed (also read by the monitor)."""
    return mgr.cache.informer(PODS, transform=trim_pod, label_selector=LABEL_RUN_ID, indexers=_POD_INDEXERS)


class _Bump:
    """Informer handler that counts changes (invalidates the cached World)."""

    def __init__(self, owner: "SharedCaches") -> None:
        self.owner = owner

    def on_add(self, obj: Any, initial: bool) -> None:
        self.owner.world_version += 1

    def on_update(self, old: Any, new: Any) -> None:
        if _rv(old) != _rv(new):
            self.owner.world_version += 1

    def on_delete(self, obj: Any, tombstone: bool) -> None:
        self.owner.world_version += 1


class SharedCaches:
    """Every informer both workload reconcilers read, and the World built from them."""

    def __init__(
        self,
        mgr: Manager,
        downloader_image: str | None = None,
        kinds: Iterable[WorkloadKind] | None = None,
        *,
        download_deadline_seconds: int | None = None,
    ) -> None:
        self.mgr = mgr
        self.kinds: tuple[WorkloadKind, ...] = tuple(WORKLOAD_KINDS.values() if kinds is None else kinds)
        # The resources come from the declared tables (RBAC is generated from them).
        undeclared = set(child_resources(self.kinds).items()) - set(CHILD_RESOURCES.items())
        undeclared |= {(k.kind, k.resource) for k in self.kinds} - set(OWN_RESOURCES.items())
        if undeclared:
            raise ValueError(f"kinds not declared in WORKLOAD_KINDS: {sorted(k for k, _ in undeclared)}")
        names = {k.kind for k in self.kinds}
        self.downloader_image = downloader_image or environment.operator_image()
        self.download_deadline_seconds = download_deadline_seconds or environment.download_deadline_seconds()
        self.settings = settings_for(mgr)
        own_indexers = {
            IDX_DURATION_RUNNING: _idx_duration_running,
            IDX_PENDING_GPU: _idx_pending_gpu,
            IDX_UP_PREEMPTABLE: _idx_up_preemptable,
            IDX_ERROR: _idx_error,
        }
        self.own: dict[str, Informer] = {
            kind: mgr.cache.informer(res, indexers=own_indexers) for kind, res in OWN_RESOURCES.items() if kind in names
        }
        self.queue_configs = mgr.cache.informer(KAIWOQUEUECONFIGS)
        self.nodes = node_informer(mgr)  # the shared, trimmed Node cache
        self.wpcs = mgr.cache.informer(WORKLOADPRIORITYCLASSES)
        self.pcs = mgr.cache.informer(PRIORITYCLASSES)
        self.cluster_queues = mgr.cache.informer(CLUSTERQUEUES)
        self.aim_configs = mgr.cache.informer(AIMNAMESPACECONFIGS)
        self.priority = priority_policy_for(mgr)  # the namespaces' allow-lists (shared with the Model controller)
        self.children: dict[str, Informer] = {
            kind: mgr.cache.informer(res, transform=TRANSFORMS.get(kind)) for kind, res in CHILD_RESOURCES.items()
        }
        self.pods = pod_informer(mgr)
        self.workloads = mgr.cache.informer(
            WORKLOADS, transform=trim_workload, indexers={IDX_JOB_UID: index_by_label(LABEL_KUEUE_JOB_UID)}
        )
        self.world_version = 0
        self._world: World | None = None
        self._world_key: tuple | None = None
        bump = _Bump(self)
        for inf in (self.settings.informer, self.queue_configs, self.nodes, self.wpcs, self.pcs, self.aim_configs,
                    self.priority.namespaces):
            inf.add_handler(bump)
        #: read-your-writes, shared with every writer of this manager
        self.expectations = mgr.expectations
        for kind, inf in list(self.children.items()) + list(self.own.items()):
            inf.add_handler(self.expectations.pruner(kind))

    def world(self) -> World:
        """The World for the current caches (rebuilt only after a change)."""
        config = self.settings.raw()
        if config is None:
            raise ConfigMissing("KaiwoConfig 'kaiwo' not found")
        qc = self.queue_configs.get(QUEUE_CONFIG_NAME)
        if qc is None:
            raise QueueConfigMissing(f"KaiwoQueueConfig {QUEUE_CONFIG_NAME!r} not found")
        key = (self.world_version, _rv(config), _rv(qc))
        if self._world is None or self._world_key != key:
            self._world = World.from_dicts(
                config=config,
                nodes=self.nodes.list(),
                queue_config=qc,
                workload_priority_classes=_names(self.wpcs.list()),
                priority_classes=_names(self.pcs.list()),
                downloader_image=self.downloader_image,
                download_deadline_seconds=self.download_deadline_seconds,
                aim_configs=effective_by_namespace(self.aim_configs.list()),
                priority=self.priority.rules(),
            )
            self._world_key = key
        return self._world

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        """A child from the cache, or what we last wrote if the cache lags."""
        cached = self.children[kind].get(name, namespace)
        return self.expectations.view((kind, namespace, name), cached)

    def get_own(self, kind: str, namespace: str, name: str) -> dict | None:
        cached = self.own[kind].get(name, namespace)
        return self.expectations.view((kind, namespace, name), cached)


