"""The Model controller: bare server Pods per Model, in every namespace.

One reconcile per Model reads the caches and, in order:

1. keeps the ``features.kubeai.org/<Feature>`` labels, unless
   ``autoscalingDisabled`` the replica bounds, and with a cache profile the
   cache-eviction finalizer on the Model (one patch);
2. builds the desired Pod; a bad field (profile, cache profile, JSON patch)
   ends in ``ConfigValid=False`` naming it, a Warning event and no Pod
   changes; other Models are unaffected and the Model is retried when the
   system config changes;
3. syncs the files ConfigMap (and, with ``proxy.mode: external``, the headless Service);
4. runs the cache state machine when a cache profile is set (:mod:`.cache`);
5. executes the rollout plan (:mod:`.rollout`);
6. writes ``status``, at one place (:meth:`ModelReconciler.reconcile`), only when it
   differs: every step above returns what the status should be (:class:`Outcome`).

Caches lag behind our own writes, so a reconcile reads the Model through the
manager's read-your-writes store (:mod:`kaiwo_ctrl.runtime.control.expectations`),
and Pods we created or deleted are recorded there as the Model's children: the
plan waits until the cache shows them, so a fast re-reconcile never creates twice.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.aim.effective import resolve
from kaiwo_ctrl.kinds import AIMNAMESPACECONFIGS, MODELS
from kaiwo_ctrl.runtime.api.client import ApiError
from kaiwo_ctrl.runtime.control.controller import Result
from kaiwo_ctrl.runtime.control.expectations import Key
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.cache.informer import strip_managed_fields
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.control.predicate import AnnotationsChanged, GenerationChanged
from kaiwo_ctrl.runtime.objects.ownership import set_controller_reference
from kaiwo_ctrl.settings.priority import priority_policy_for
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS, JOBS, PODS, PRIORITYCLASSES, PVCS

from kaiwo_ctrl.serving.model import cache as cachelib
from kaiwo_ctrl.serving.model.adapters import AdapterLimits, AdapterSync, new_failures
from kaiwo_ctrl.serving.model.admission import OPERATOR_GATE, KueueAdmission, Quota, queue_labels, requests_gpus
from kaiwo_ctrl.serving.model.config import ConfigSource
from kaiwo_ctrl.serving.model.external import ExternalMode
from kaiwo_ctrl.serving.model.files import sync_files
from kaiwo_ctrl.serving.model.modelfields import bounded_replicas, feature_labels
from kaiwo_ctrl.serving.podcontract import LABEL_APP, LABEL_MODEL
from kaiwo_ctrl.serving.model.pods import build_pod
from kaiwo_ctrl.serving.model.rollout import plan
from kaiwo_ctrl.serving.model.status import QUOTA_RESERVED, desired_status, skipped_model_reporter

log = logging.getLogger("kaiwo_ctrl.serving.model.controller")

IDX_MODEL = "model"
SELECTOR = f"{LABEL_APP}=model"


def trim_pod(obj: dict) -> dict:
    """Keep what the controller and the endpoint readers need of a server Pod
    (the node, and Kueue's admission gate while it is on)."""
    strip_managed_fields(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": obj.get("metadata") or {},
        "spec": {k: spec[k] for k in ("nodeName", "schedulingGates") if spec.get(k)},
        "status": {
            k: status[k] for k in ("phase", "conditions", "podIP", "containerStatuses", "reason") if k in status
        },
    }


def _index_model(obj: Mapping[str, Any]) -> list[str]:
    meta = obj.get("metadata") or {}
    m = (meta.get("labels") or {}).get(LABEL_MODEL)
    return [f"{meta.get('namespace')}/{m}"] if m else []


#: Seconds before a Pod the API server refused is tried again (what it needs may
#: appear). A missing PriorityClass is not retried on a timer: its creation is
#: watched and enqueues the Models that name it.
REJECTED_RETRY = 30.0


class PodRejected(Exception):
    """The API server refused a server Pod (the message names the field)."""


@dataclass(frozen=True)
class Outcome:
    """What one pass decided: the status the Model should have (None: leave it, e.g. while the cache
    lags our own Pod writes) and when to come back. The reconcile writes the status at one place."""

    status: dict | None
    result: Result | None = None


class ModelReconciler:
    def __init__(self, mgr: Manager, source: ConfigSource, adapter_limits: AdapterLimits | None = None) -> None:
        self.mgr = mgr
        self.client = mgr.client
        self.source = source
        self.events = mgr.recorder.for_component("kaiwo-ctrl-models")
        self.models = mgr.cache.informer(MODELS)
        self.models.add_handler(skipped_model_reporter(mgr))  # too deep to cache: ConfigValid=False naming the field
        self.pods = mgr.cache.informer(PODS, label_selector=SELECTOR, transform=trim_pod, indexers={IDX_MODEL: _index_model})
        self.configmaps = mgr.cache.informer(CONFIGMAPS, label_selector=SELECTOR)
        self.jobs = mgr.cache.informer(JOBS)
        self.pvcs = mgr.cache.informer(PVCS)
        self.aim_configs = mgr.cache.informer(AIMNAMESPACECONFIGS)
        self.priority_classes = mgr.cache.informer(PRIORITYCLASSES)
        #: read-your-writes, shared with every writer of this manager
        self.expectations = mgr.expectations
        self.models.add_handler(self.expectations.pruner(MODELS.kind))
        self.cache = cachelib.CacheManager(cachelib.CacheParts(
            self.client, self.events, source, self.jobs, self.pvcs, self.namespace_config, self.expectations))
        self.adapters = AdapterSync(self.client, self.expectations, adapter_limits,
                                    on_done=lambda ns, name: self.controller.enqueue(Request(ns, name)))
        self.kueue = KueueAdmission(mgr)
        self.external = ExternalMode(mgr, source, SELECTOR)  # proxy.mode: headless Services, ScaleFromZero
        self.priority = priority_policy_for(mgr)

    # ------------------------------------------------------------ wiring
    def setup(self, workers: int = 4) -> None:
        c = self.mgr.new_controller("model", self.reconcile, workers=workers)
        c.for_(self.models, predicates=[self.expectations.echo_filter(MODELS.kind)])
        c.watches(self.pods, self._map_labelled)
        c.owns(self.configmaps, "kubeai.org", "Model")
        c.owns(self.jobs, "kubeai.org", "Model")
        c.owns(self.external.services, "kubeai.org", "Model")
        c.watches(self.pvcs, self._map_pvc)
        # credentials and pull secrets of the namespace: a change re-renders its Models' Pods
        c.watches(self.aim_configs, self._map_namespace, predicates=[GenerationChanged()])
        c.watches(self.priority_classes, self._map_priority_class)
        c.watches(self.priority.namespaces, self._map_namespace_models, predicates=[AnnotationsChanged()])
        c.watches(self.kueue.workloads, self._map_workload)
        c.watches(self.kueue.settings.informer, lambda _obj: self._all_requests())
        self.controller = c
        self.source.listeners.append(lambda _cfg: self.enqueue_all())
        self.mgr.add_runnable("model-config-watch", self.source.watch, leader=True)
        self.mgr.add_runnable("model-adapter-session", self._hold_adapter_session, leader=True)

    async def _hold_adapter_session(self) -> None:
        """Closes the adapter HTTP session when the manager stops."""
        try:
            await asyncio.Event().wait()
        finally:
            await self.adapters.close()

    def _all_requests(self) -> list[Request]:
        return [Request(m["metadata"].get("namespace", ""), m["metadata"]["name"]) for m in self.models.list()]

    def enqueue_all(self) -> None:
        for r in self._all_requests():
            self.controller.enqueue(r)

    def _map_workload(self, obj: dict) -> list[Request]:
        """A Kueue Workload made for a server Pod: the Pod's Model."""
        meta = obj.get("metadata") or {}
        out = []
        for ref in meta.get("ownerReferences") or ():
            pod = self.pods.get(ref.get("name", ""), meta.get("namespace")) if ref.get("kind") == "Pod" else None
            out += self._map_labelled(pod) if pod else []
        return out

    @staticmethod
    def _map_labelled(obj: dict) -> list[Request]:
        meta = obj.get("metadata") or {}
        m = (meta.get("labels") or {}).get(LABEL_MODEL)
        return [Request(meta.get("namespace", ""), m)] if m else []

    def _map_namespace_models(self, obj: dict) -> list[Request]:
        """A Namespace (its priority-class allow-list): its Models."""
        ns = (obj.get("metadata") or {}).get("name") or ""
        return [Request(ns, m["metadata"]["name"]) for m in self.models.list(ns)] if ns else []

    def _map_namespace(self, obj: dict) -> list[Request]:
        ns = (obj.get("metadata") or {}).get("namespace") or ""
        return [Request(ns, m["metadata"]["name"]) for m in self.models.list(ns)] if ns else []

    def _map_priority_class(self, obj: dict) -> list[Request]:
        name = (obj.get("metadata") or {}).get("name")
        return [
            Request(m["metadata"].get("namespace", ""), m["metadata"]["name"])
            for m in self.models.list()
            if name and (m.get("spec") or {}).get("priorityClassName") == name
        ]

    def namespace_config(self, ns: str) -> Mapping[str, Any] | None:
        """The effective AIMNamespaceConfig of ``ns`` (oldest wins), or None."""
        return resolve(self.aim_configs.list(ns)).effective

    def _map_pvc(self, obj: dict) -> list[Request]:
        meta = obj.get("metadata") or {}
        if not meta.get("name", "").startswith(cachelib.PVC_PREFIX):
            return []
        ns = meta.get("namespace", "")
        prefix = cachelib.PVC_ANNOTATION_PREFIX
        return [Request(ns, k[len(prefix):]) for k in meta.get("annotations") or {} if k.startswith(prefix)]

    def model_pods(self, ns: str, name: str, uid: str | None = None) -> list[dict]:
        """The server Pods of a Model: labelled with its name and, given ``uid``, controlled
        by it. A Pod someone else made with the same labels is never counted, replaced or
        deleted (the proxy may still route to it when it is Ready)."""
        pods = self.pods.by_index(IDX_MODEL, f"{ns}/{name}")
        if uid is None:
            return pods
        return [p for p in pods if any(r.get("controller") and r.get("uid") == uid
                                       for r in (p.get("metadata") or {}).get("ownerReferences") or ())]

    # --------------------------------------------------------- reconcile
    async def reconcile(self, req: Request) -> Result | None:
        key = (MODELS.kind, req.namespace, req.name)
        model = self.expectations.view(key, self.models.get(req.name, req.namespace))
        if model is None:
            self.adapters.forget(req.namespace, req.name)
            return None  # its expectations went with its delete event (the pruner)
        model = {**model, "metadata": dict(model["metadata"])}  # this pass's copy: cached objects are never changed
        if model["metadata"].get("deletionTimestamp"):
            self.adapters.forget(req.namespace, req.name)
            await self.cache.finalize(model, self.model_pods(req.namespace, req.name, model["metadata"].get("uid")))
            return None
        model = await self._sync_model_object(key, model)
        await self.external.sync(model)
        outcome = await self._pass(req, key, model)
        if outcome.status is not None:  # the pass's one status write (only when it differs)
            await self._set_status(key, model, outcome.status)
        return outcome.result

    async def _pass(self, req: Request, key: Key, model: dict) -> Outcome:
        """Desired -> apply -> observe for one Model; what its status should be is returned, not written."""
        config = self.source.current
        queue = self.kueue.queue_of(model)
        try:
            if refused := self.priority.rules(req.namespace).check(model):
                raise FieldError(*refused)  # the admin's allow-list: no Pod with a class not allowed here
            ns_config = self.namespace_config(req.namespace)
            desired = build_pod(model, config, ns_config, queue_labels(model, queue) if queue else None)
            if not queue and requests_gpus(desired.pod) and (queue := self.kueue.gpu_queue()):
                # GPUs are quota: where a queue config exists, GPU Models go through Kueue by default
                desired = build_pod(model, config, ns_config, queue_labels(model, queue))
        except FieldError as e:
            self.events.warning(model, "InvalidConfig", str(e))
            return Outcome(desired_status(model, pods=None, config_error=str(e), cache_loaded=None))
        await sync_files(self.client, self.configmaps, model)
        cache_loaded: bool | None = None
        if (model.get("spec") or {}).get("cacheProfile"):
            cache_loaded, load_error = await self.cache.ensure_loaded(model, config, self.namespace_config(req.namespace))
            if not cache_loaded:
                return Outcome(desired_status(model, pods=None, config_error=None, cache_loaded=False, cache_error=load_error))
        return await self._reconcile_pods(key, model, desired, queue, cache_loaded)

    async def _reconcile_pods(self, key: Key, model: dict, desired: Any, queue: str | None, cache_loaded: bool | None) -> Outcome:
        meta = model["metadata"]
        pods = self.model_pods(meta.get("namespace", ""), meta["name"], meta.get("uid"))
        # False while the cache lacks Pods we created or still lists Pods we deleted: its
        # counts are stale, so none are written (pods=None keeps the stored ones)
        seen = self.expectations.children_seen(key, pods)
        if queue and (queue_error := await self._ensure_local_queue(model, queue)):
            status = desired_status(model, pods=pods if seen else None, config_error=None, cache_loaded=cache_loaded,
                                    quota=Quota("False", "LocalQueueError", queue_error))
            return Outcome(status, Result(requeue_after=REJECTED_RETRY))
        if not seen:
            return Outcome(None)  # the watch events of those Pods enqueue the Model again
        try:
            pods = await self._execute(key, model, pods, desired, self.source.current.surge)
        except PodRejected as e:
            status = desired_status(model, pods=pods, config_error=None, cache_loaded=cache_loaded, pod_error=str(e))
            return Outcome(status, None if self._priority_class_missing(model) else Result(requeue_after=REJECTED_RETRY))
        for name in await self.kueue.ungate(self.client, pods) if queue else ():
            self.events.normal(model, "PodAdmitted", f"Kueue admitted server Pod {name}; removed gate {OPERATOR_GATE}")
        quota = self._quota(model, pods) if queue else None
        # adapter loads run in the background (bounded per namespace); their end enqueues the Model
        adapters = self.adapters.sync(model, pods)
        for message in new_failures(model, adapters.failed):
            self.events.warning(model, "AdapterSyncFailed", message[:1024])
        status = desired_status(model, pods=pods, config_error=None, cache_loaded=cache_loaded, quota=quota, adapters=adapters)
        return Outcome(status, Result(requeue_after=adapters.retry_after) if adapters.retry_after else None)

    async def _ensure_local_queue(self, model: dict, queue: str) -> str | None:
        """The LocalQueue of a Model under Kueue; an error message when it cannot be made."""
        error, created = await self.kueue.ensure_local_queue(self.client, model["metadata"].get("namespace", ""), queue)
        if error:
            self.events.warning(model, "LocalQueueError", error)
        elif created:
            self.events.normal(model, "LocalQueueCreated", f"created LocalQueue {created}")
        return error

    def _quota(self, model: dict, pods: list[dict]) -> Quota:
        """Kueue's verdict on the replicas, with an event when it changes and per preemption."""
        q = self.kueue.quota(pods)
        for message in self.kueue.new_preemptions(q):
            self.events.warning(model, "Preempted", f"Kueue preempted a server Pod: {message}"[:1024])
        old: dict[str, Any] = next((c for c in (model.get("status") or {}).get("conditions") or () if c.get("type") == QUOTA_RESERVED), {})
        if (old.get("status"), old.get("reason")) != (q.status, q.reason):
            if q.status == "True":
                self.events.normal(model, "QuotaReserved", q.message)
            else:
                self.events.warning(model, "QuotaPending" if q.reason == "Pending" else q.reason, q.message[:1024])
        return q

    def _priority_class_missing(self, model: dict) -> bool:
        """The Model names a PriorityClass the cache does not hold (its creation enqueues the Model)."""
        name = (model.get("spec") or {}).get("priorityClassName")
        return bool(name) and self.priority_classes.get(str(name)) is None

    async def _sync_model_object(self, key: Key, model: dict) -> dict:
        """Feature labels, replica bounds and the cache-eviction finalizer, in one patch guarded by resourceVersion."""
        meta, spec = model["metadata"], model.get("spec") or {}
        labels = feature_labels(model)
        replicas = bounded_replicas(spec)
        finalizers = cachelib.finalizers_with_eviction(model)
        if not labels and replicas is None and finalizers is None:
            return model
        patch: dict[str, Any] = {"metadata": {"resourceVersion": meta["resourceVersion"]}}
        if labels:
            patch["metadata"]["labels"] = labels
        if finalizers is not None:
            patch["metadata"]["finalizers"] = finalizers
        if replicas is not None:
            patch["spec"] = {"replicas": replicas}
        out = strip_managed_fields(await self.client.patch(MODELS, meta["name"], patch, meta.get("namespace")))
        self.expectations.wrote(key, meta["resourceVersion"], out)
        return out

    async def _execute(self, key: Key, model: dict, pods: list[dict], desired: Any, surge: int) -> list[dict]:
        replicas = (model.get("spec") or {}).get("replicas") or 0
        p = plan(pods, desired.hash, replicas, surge, self.kueue.blocked(pods))
        if p.empty:
            return pods
        meta = model["metadata"]
        deleted: list[str] = []
        for pod in p.delete:
            pm = pod["metadata"]
            await self.client.delete(PODS, pm["name"], pm.get("namespace"), uid=pm.get("uid"))
            deleted.append(pm["name"])
        created: list[dict] = []
        for _ in range(p.create):
            body = {**desired.pod, "metadata": dict(desired.pod["metadata"])}
            set_controller_reference(body, model, owner_namespaced=True)
            try:
                created.append(await self.client.create(PODS, body))
            except ApiError as e:
                self.expectations.expect_children(key, [c["metadata"]["name"] for c in created], deleted)
                if e.invalid or e.forbidden:  # e.g. a missing PriorityClass: the message names it
                    self.events.warning(model, "PodRejected", _api_message(e))
                    raise PodRejected(_api_message(e)) from None
                raise
        self.expectations.expect_children(key, [c["metadata"]["name"] for c in created], deleted)
        if created:
            self.events.normal(model, "PodsCreated", f"created {len(created)} server Pod(s) with spec hash {desired.hash}")
        if deleted:
            self.events.normal(model, "PodsDeleted", f"deleted {len(deleted)} server Pod(s): {', '.join(deleted[:5])}")
        log.info("model pods changed", extra={"model": meta["name"], "pods_created": len(created), "pods_deleted": deleted})
        gone = set(deleted)
        return [x for x in pods if x["metadata"]["name"] not in gone] + [trim_pod(c) for c in created]

    async def _set_status(self, key: Key, model: dict, status: dict) -> None:
        """``status`` when it differs, through the manager's one status writer (guarded
        by the resourceVersion of ``model``; read back until the cache shows it)."""
        meta, status = model["metadata"], self.external.status(model, status)
        if status == (model.get("status") or {}) or meta.get("deletionTimestamp"):
            return
        try:
            await self.expectations.write_status(
                key, model, status,
                lambda patch: self._patch_status(meta["name"], meta.get("namespace"), patch),
                own=True,  # the Model watch drops the echo (echo_filter in setup)
            )
        except ApiError as e:
            if not e.not_found:
                raise

    async def _patch_status(self, name: str, ns: str | None, patch: dict) -> dict:
        return strip_managed_fields(await self.client.patch_status(MODELS, name, patch, ns))


def _api_message(e: ApiError) -> str:
    body = e.body if isinstance(e.body, dict) else {}
    return str(body.get("message") or e)[:1024]


def setup(mgr: Manager, source: ConfigSource, workers: int = 4, adapter_limits: AdapterLimits | None = None) -> ModelReconciler:
    rec = ModelReconciler(mgr, source, adapter_limits)
    rec.setup(workers=workers)
    return rec
