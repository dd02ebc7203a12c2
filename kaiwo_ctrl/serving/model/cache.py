"""Cache profiles: model weights downloaded once into a shared PVC.

One PVC ``shared-model-cache-<profile>`` per cache profile, shared by every
Model in the namespace that uses it, never owned and never deleted. A Model's
files live in ``models/<name>-<uid>`` on it; the PVC annotation
``models.kubeai.org/<name>`` records ``{"uid", "timestamp"}`` once the loader
Job ``load-cache-<name>`` (``kaiwo-ctrl download model``) has completed. No
server Pod exists before that. The Model carries finalizer
``kubeai.org/cache-eviction``: on deletion its Pods are deleted, Job
``evict-cache-<name>`` removes the directory, the annotation is dropped and
the finalizer released.

Unlike KubeAI, the Pods are created on the same pass that records the
annotation and ``status.cache.loaded`` turns true on that pass too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kaiwo_ctrl.aim.credentials import pull_secrets
from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.observe.events import ComponentRecorder
from kaiwo_ctrl.runtime.cache.informer import Informer, strip_managed_fields
from kaiwo_ctrl.runtime.control.expectations import Expectations
from kaiwo_ctrl.runtime.objects.ownership import controller_of, set_controller_reference
from kaiwo_ctrl.runtime.api.resources import JOBS, PODS, PVCS

from kaiwo_ctrl.serving.model.config import ConfigSource, SystemConfig
from kaiwo_ctrl.serving.model.pods import cache_dir, model_credentials, spec_hash, user_env

PVC_PREFIX = "shared-model-cache-"
PVC_ANNOTATION_PREFIX = "models.kubeai.org/"
FINALIZER = "kubeai.org/cache-eviction"
#: Hash of the loader Job's pod spec: a failed loader is replaced once the Model or
#: its credentials change (a fixed URL or Secret), not left failed until deleted by hand.
LOADER_HASH_ANNOTATION = "kaiwo.silogen.ai/loader-hash"


def pvc_name(profile: str) -> str:
    return PVC_PREFIX + profile


def loader_job_name(name: str) -> str:
    return f"load-cache-{name}"


def evict_job_name(name: str) -> str:
    return f"evict-cache-{name}"


def desired_pvc(namespace: str, profile_name: str, profile: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}}
    if profile.get("storageClassName"):
        spec["storageClassName"] = profile["storageClassName"]
    if profile.get("persistentVolumeName"):
        spec["volumeName"] = profile["persistentVolumeName"]
        spec.setdefault("storageClassName", "")  # a named PV: no dynamic provisioning
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": pvc_name(profile_name), "namespace": namespace},
        "spec": spec,
    }


def _job(model: dict[str, Any], name: str, container: dict[str, Any], mount: dict[str, Any], profile: str,
         pod_spec: dict[str, Any] | None = None) -> dict:
    meta = model["metadata"]
    pod_spec = dict(pod_spec or {})
    volumes = [{"name": "model", "persistentVolumeClaim": {"claimName": pvc_name(profile)}}, *pod_spec.pop("volumes", [])]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": meta.get("namespace"), "labels": {"app": "model", "model": meta["name"]}},
        "spec": {
            "ttlSecondsAfterFinished": 60,
            "template": {
                "metadata": {"labels": {"model": meta["name"]}},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [{**container, "volumeMounts": [*container.get("volumeMounts", []), mount]}],
                    "volumes": volumes,
                    **pod_spec,
                },
            },
        },
    }
    set_controller_reference(job, model, owner_namespaced=True)
    return job


def loader_job(model: dict[str, Any], config: SystemConfig, ns_config: Any = None) -> dict[str, Any]:
    """The loader Job; ``ns_config`` (the namespace's effective AIMNamespaceConfig)
    supplies credentials as for the server Pod, and its image pull secrets."""
    meta, spec = model["metadata"], model.get("spec") or {}
    directory = cache_dir(meta["name"], meta.get("uid", ""))
    container: dict[str, Any] = {
        "name": "loader",
        "image": config.loader_image,
        "command": ["kaiwo-ctrl", "download", "model"],
        "args": [spec.get("url", ""), directory],
        "env": user_env(spec),
    }
    if spec.get("envFrom"):
        container["envFrom"] = spec["envFrom"]
    pod_spec = _pull_secrets(config, ns_config)
    model_credentials(model, config, ns_config).apply(container, pod_spec)
    mount = {"name": "model", "mountPath": directory, "subPath": directory.lstrip("/")}
    job = _job(model, loader_job_name(meta["name"]), container, mount, spec["cacheProfile"], pod_spec)
    job["metadata"]["annotations"] = {LOADER_HASH_ANNOTATION: spec_hash(job["spec"]["template"]["spec"])}
    return job


def _pull_secrets(config: SystemConfig, ns_config: Any) -> dict[str, Any]:
    """Pod-spec pull secrets for the loader image, as for the server Pods."""
    secrets = pull_secrets(ns_config, config.server_pods.get("imagePullSecrets"))
    return {"imagePullSecrets": secrets} if secrets else {}


def evict_job(model: dict[str, Any], config: SystemConfig, ns_config: Any = None) -> dict[str, Any]:
    meta = model["metadata"]
    directory = cache_dir(meta["name"], meta.get("uid", ""))
    container = {"name": "evictor", "image": config.loader_image, "command": ["rm", "-rf", directory]}
    mount = {"name": "model", "mountPath": "/models", "subPath": "models"}
    return _job(model, evict_job_name(meta["name"]), container, mount, model["spec"]["cacheProfile"],
                _pull_secrets(config, ns_config))


def _job_condition(job: dict[str, Any] | None, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in (job or {}).get("status", {}).get("conditions") or ())


def job_complete(job: dict[str, Any] | None) -> bool:
    return _job_condition(job, "Complete")


def _loader_hash(job: dict[str, Any]) -> str:
    return (job["metadata"].get("annotations") or {}).get(LOADER_HASH_ANNOTATION, "")


def job_failure(job: dict[str, Any] | None) -> str | None:
    """The reason/message of a Job's ``Failed=True`` condition, None while it has not failed."""
    for c in (job or {}).get("status", {}).get("conditions") or ():
        if c.get("type") == "Failed" and c.get("status") == "True":
            text = ": ".join(x for x in (c.get("reason"), c.get("message")) if x)
            return text[:300] or "Failed"
    return None


def record(uid: str) -> str:
    return json.dumps({"uid": uid, "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})


@dataclass(frozen=True)
class CacheParts:
    """What the cache state machine works with (given by the Model controller, not the controller
    itself). It writes its Jobs and the shared PVC; of the Model, only the release of its finalizer once
    a deleted Model's files are evicted. Adding that finalizer is part of the controller's one metadata
    patch of a pass (:func:`finalizers_with_eviction`), and what the cache state means for the Model's
    status is returned, never written here."""

    client: Client
    events: ComponentRecorder
    source: ConfigSource
    jobs: Informer
    pvcs: Informer
    namespace_config: Callable[[str], Mapping[str, Any] | None]
    expectations: Expectations


def finalizers_with_eviction(model: Mapping[str, Any]) -> list[str] | None:
    """The Model's finalizers with ``kubeai.org/cache-eviction`` added, or None when it needs no change
    (no cache profile, or already there). A Model with a cache profile carries it from its first pass,
    before a loader Job can write files, so its files are evicted whenever it is deleted."""
    meta = model.get("metadata") or {}
    fins = list(meta.get("finalizers") or [])
    if not (model.get("spec") or {}).get("cacheProfile") or FINALIZER in fins:
        return None
    return [*fins, FINALIZER]


class CacheManager:
    def __init__(self, parts: CacheParts) -> None:
        self.rec = parts

    async def ensure_loaded(self, model: dict[str, Any], config: SystemConfig, ns_config: Any = None) -> tuple[bool, str]:
        """Drive the loader: (True, "") once the cache holds this Model's files,
        (False, message) while it loads, the message naming the Job once it failed."""
        meta, spec = model["metadata"], model["spec"]
        ns, name, uid = meta.get("namespace"), meta["name"], meta.get("uid")
        profile = spec["cacheProfile"]
        pvc = self.rec.pvcs.get(pvc_name(profile), ns)
        if pvc is None:
            pvc = await self.rec.client.create(PVCS, desired_pvc(ns, profile, config.cache_profiles[profile]))
        annotation = (pvc["metadata"].get("annotations") or {}).get(PVC_ANNOTATION_PREFIX + name)
        loaded = False
        try:
            loaded = annotation is not None and json.loads(annotation).get("uid") == uid
        except ValueError:
            loaded = False
        job_name = loader_job_name(name)
        job, stale = self._job_for(model, job_name)
        if not loaded and stale:
            await self._delete_job(job)
            return False, ""
        if not loaded:
            state = await self._drive_loader(model, config, ns_config, job)
            if state is not None:
                return state
            patch = {"metadata": {"annotations": {PVC_ANNOTATION_PREFIX + name: record(uid)}}}
            await self.rec.client.patch(PVCS, pvc_name(profile), patch, ns)
            self.rec.events.normal(model, "CacheLoaded", f"model files cached in PVC {pvc_name(profile)}")
        if job is not None and not job["metadata"].get("deletionTimestamp"):
            await self.rec.client.delete(JOBS, job_name, ns, propagation="Foreground")
        return True, ""

    async def _drive_loader(
        self, model: dict[str, Any], config: SystemConfig, ns_config: Any, job: dict[str, Any] | None
    ) -> tuple[bool, str] | None:
        """The loader Job while the cache is not loaded: None once it completed,
        else (False, message), the message naming the Job when it failed."""
        meta = model["metadata"]
        ns, job_name = meta.get("namespace"), loader_job_name(meta["name"])
        if job is None:
            await self.rec.client.create(JOBS, loader_job(model, config, ns_config))
            self.rec.events.normal(model, "CacheLoading", f"started Job {job_name} to load the cache")
            return False, ""
        if job_complete(job):
            return None
        failed = job_failure(job)
        if failed is None or job["metadata"].get("deletionTimestamp"):
            return False, ""
        if _loader_hash(job) != _loader_hash(loader_job(model, config, ns_config)):
            await self.rec.client.delete(JOBS, job_name, ns, propagation="Background")
            self.rec.events.normal(model, "CacheLoading", f"Job {job_name} failed; replacing it after a change")
            return False, ""
        message = f"loader Job {job_name} failed: {failed}; see its Pod's log (delete the Job, or fix the Model, to retry)"
        if not self._reported(model, message):
            self.rec.events.warning(model, "CacheLoadFailed", message)
        return False, message

    @staticmethod
    def _reported(model: dict[str, Any], message: str) -> bool:
        """Whether the Model's status already carries this failure (no repeated events)."""
        conds = (model.get("status") or {}).get("conditions") or ()
        return any(c.get("type") == "CacheLoaded" and c.get("message") == message[:1024] for c in conds)

    def _job_for(self, model: dict[str, Any], job_name: str) -> tuple[dict[str, Any] | None, bool]:
        """(the Job of that name, whether it belongs to an earlier Model of the same
        name). An earlier Model's Job says nothing about this one's files: it is
        removed and this Model's own Job made once it is gone (its delete event
        brings the Model back)."""
        meta = model["metadata"]
        job = self.rec.jobs.get(job_name, meta.get("namespace"))
        if job is None:
            return None, False
        ref = controller_of(job) or {}
        return job, ref.get("kind") == "Model" and ref.get("uid") != meta.get("uid")

    async def _delete_job(self, job: dict[str, Any] | None) -> None:
        """Delete a Job the cache shows, unless it is going already."""
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        try:
            await self.rec.client.delete(JOBS, job["metadata"]["name"], job["metadata"].get("namespace"), propagation="Background")
        except ApiError as e:
            if not e.not_found:
                raise

    async def _delete_jobs(self, model: dict[str, Any]) -> None:
        meta = model["metadata"]
        for job_name in (loader_job_name(meta["name"]), evict_job_name(meta["name"])):
            await self._delete_job(self.rec.jobs.get(job_name, meta.get("namespace")))

    async def _evicted(self, model: dict[str, Any], profile: str | None) -> bool:
        """Drive the eviction Job: True once this Model's files are gone from the
        shared PVC (or there is no PVC to clean), its annotation removed."""
        meta = model["metadata"]
        ns, name = meta.get("namespace"), meta["name"]
        pvc = self.rec.pvcs.get(pvc_name(profile), ns) if profile else None
        if pvc is None or pvc["metadata"].get("deletionTimestamp") or profile not in self.rec.source.current.cache_profiles:
            return True
        job, stale = self._job_for(model, evict_job_name(name))
        if stale:
            await self._delete_job(job)
            return False
        if job is None:
            try:
                await self.rec.client.create(JOBS, evict_job(model, self.rec.source.current, self.rec.namespace_config(ns)))
            except ApiError as e:  # the cache is behind our own create: its event brings us back
                if not e.already_exists:
                    raise
            return False
        if not job_complete(job):
            return False
        key = PVC_ANNOTATION_PREFIX + name
        if key in (pvc["metadata"].get("annotations") or {}):
            await self.rec.client.patch(PVCS, pvc_name(profile), {"metadata": {"annotations": {key: None}}}, ns)
        return True

    async def finalize(self, model: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        """A deleted Model: its Pods deleted, its files evicted, then the finalizer
        released and only then its Jobs deleted.

        The order makes every step safe to repeat: a retry (the finalizer patch
        lost a conflict, say) still finds the completed eviction Job and goes on,
        where deleting the Job first had a retry make and run a second eviction
        Job. The Jobs are deleted on the pass that sees the eviction complete,
        not left to ``ttlSecondsAfterFinished``; a pass that finds the finalizer
        already released deletes any left over."""
        meta = model["metadata"]
        ns, name = meta.get("namespace"), meta["name"]
        for p in pods:
            if not p["metadata"].get("deletionTimestamp"):
                await self.rec.client.delete(PODS, p["metadata"]["name"], ns)
        if FINALIZER in (meta.get("finalizers") or []):
            if not await self._evicted(model, (model.get("spec") or {}).get("cacheProfile")):
                return None
            fins = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": fins or None}}
            out = strip_managed_fields(await self.rec.client.patch(MODELS, name, patch, ns))
            # Read-your-writes: the Job cache may show the eviction Job deleted before the Model cache
            # shows the release; a pass in between must not take the old finalizer for a new eviction.
            self.rec.expectations.wrote((MODELS.kind, ns or "", name), meta["resourceVersion"], out)
        await self._delete_jobs(model)
        return None
