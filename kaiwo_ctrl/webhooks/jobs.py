"""The batch Job webhooks: adopt labelled Jobs, enforce Kaiwo on GPU Jobs.

Mutating (CREATE; only Jobs labelled ``kaiwo.silogen.ai/managed: "true"``, or
with enforcement on, unlabelled Jobs in the enforced namespaces):

1. with enforcement on, a Job whose containers request or limit a GPU and
   that has no managed label gets ``kaiwo.silogen.ai/managed: "true"``. An
   explicit other value is left as written; the validating webhook refuses it;
2. a managed Job gets the queue-name label (KaiwoConfig's default cluster
   queue when missing), the Kaiwo system labels, the finalizer, and
   ``terminationGracePeriodSeconds: 0`` when its pod template has none (the
   apiserver defaults it to 30 before admission, so in practice the value
   the user or the default set stays);
3. a Job whose queue the KaiwoQueueConfig would refuse a KaiwoJob in this
   namespace (queue not listed, its ``namespaces`` exclude this one, or no
   such ClusterQueue) is refused, naming the queue-name label: the same
   function (queues.localqueue.resolve_local_queue) decides both paths;
4. unless dry-run, once the API server has stored the Job (seen by the Job
   informer, never on the review's word): the LocalQueue of that queue if
   missing and allowed, and the tracking KaiwoJob (``spec.job`` = the Job as
   mutated, ``spec.user`` = the requesting user) if there is none. The KaiwoJob
   reconciler then follows the Job's status without ever writing the Job.

   A Job created with ``generateName`` is recognised by an annotation with
   its admission request's UID (its name is chosen after admission; its
   ``kaiwo.silogen.ai/name`` label stays empty, the KaiwoJob's has the name).

   Unlike the reference, the KaiwoJob is created after the Job exists, not
   during its admission: a KaiwoJob without its Job would make the reconciler
   create that Job itself, racing (and failing) the user's own request, and a
   Job refused later in admission would leave an orphan KaiwoJob behind.

Jobs the operator itself creates for a KaiwoJob (controller owner reference
to a KaiwoJob) are left alone: they are not adopted, and deleting one (e.g.
on early termination) must not delete its KaiwoJob.

Validating: on DELETE of a managed Job, follow the Job on the API server and,
once it shows the review's UID being deleted, release the finalizer and
delete the tracking KaiwoJob (jobdelete.py; nothing on dry-run); with
enforcement on, refuse the CREATE of a GPU Job that is not managed.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.kinds import KAIWOJOBS
from kaiwo_ctrl.queues.constants import QUEUE_CONFIG_NAME
from kaiwo_ctrl.queues.localqueue import create_local_queue, resolve_local_queue
from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.objects.packed import unpacked
from kaiwo_ctrl.workloads.base.labels import LABEL_MANAGED, LABEL_NAME, LABEL_QUEUE_NAME, system_labels
from kaiwo_ctrl.workloads.base.resources import container_requests_gpu
from kaiwo_ctrl.workloads.base.world import Settings

from .jobdelete import FINALIZER, DeleteFollower, controlled_by_kaiwojob
from .server import Review, Verdict

log = logging.getLogger("kaiwo_ctrl.webhooks.jobs")

UNKNOWN_USER = "unknown-user"
ENFORCEMENT_MESSAGE = "all jobs must have 'kaiwo.silogen.ai/managed' label"
#: On a Job created with generateName: the UID of its admission request.
ADMISSION_ANNOTATION = "kaiwo.silogen.ai/admission-uid"
UID_KEY = "uid:"


def job_requests_gpu(job: Mapping[str, Any], default_gpu_key: str) -> bool:
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = list(pod.get("containers") or []) + list(pod.get("initContainers") or [])
    return any(container_requests_gpu(c, default_gpu_key) for c in containers if isinstance(c, Mapping))


def _set(ops: list[dict], parent: Mapping[str, Any], path: str, key: str, value: Any) -> None:
    ops.append({"op": "replace" if key in parent else "add", "path": f"{path}/{key}", "value": value})


def mutation(job: Mapping[str, Any], settings: Settings, user: str, enforce: bool) -> tuple[dict, list[dict]] | None:
    """The mutated Job and the JSON patch that makes it; ``None`` when not managed. Pure."""
    meta = job.get("metadata") or {}
    if meta.get("deletionTimestamp") or controlled_by_kaiwojob(job):
        return None
    labels = dict(meta.get("labels") or {})
    if enforce and LABEL_MANAGED not in labels and job_requests_gpu(job, settings.default_gpu_resource_key):
        labels[LABEL_MANAGED] = "true"
    if labels.get(LABEL_MANAGED) != "true":
        return None
    labels[LABEL_QUEUE_NAME] = labels.get(LABEL_QUEUE_NAME) or settings.default_cluster_queue_name
    labels.update(system_labels("KaiwoJob", meta.get("name") or "", user, ""))
    labels[LABEL_MANAGED] = "true"
    out = copy.deepcopy(dict(job))
    out["metadata"] = {**meta, "labels": labels}
    ops: list[dict] = []
    if labels != (meta.get("labels") or {}):
        _set(ops, meta, "/metadata", "labels", labels)
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER not in finalizers:
        _set(ops, meta, "/metadata", "finalizers", finalizers + [FINALIZER])
    pod = ((out.get("spec") or {}).get("template") or {}).get("spec")
    if isinstance(pod, dict) and pod.get("terminationGracePeriodSeconds") is None:
        _set(ops, pod, "/spec/template/spec", "terminationGracePeriodSeconds", 0)
        pod["terminationGracePeriodSeconds"] = 0
    return out, ops


def tracking_kaiwojob(job: Mapping[str, Any], user: str) -> dict[str, Any]:
    """The KaiwoJob that follows an adopted (stored) Job.

    It carries a plain owner reference to the Job, so the garbage collector
    deletes it with the Job even when the DELETE webhook was not reached.
    """
    meta = job["metadata"]
    labels = {**(meta.get("labels") or {}), LABEL_NAME: meta["name"]}
    spec_job = {k: copy.deepcopy(v) for k, v in job.items() if k not in ("status", "metadata")}
    spec_job["metadata"] = {k: copy.deepcopy(meta[k]) for k in ("name", "namespace", "labels", "annotations") if meta.get(k)}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta.get("uid")}
    return {
        "apiVersion": KAIWOJOBS.api_version,
        "kind": KAIWOJOBS.kind,
        "metadata": {"name": meta["name"], "namespace": meta.get("namespace"), "labels": labels,
                     **({"ownerReferences": [owner]} if meta.get("uid") else {})},
        "spec": {"user": user, "job": spec_job, "clusterQueue": labels[LABEL_QUEUE_NAME]},
    }


@dataclass
class JobWebhooks:
    client: Client
    settings: Callable[[], Settings]
    kaiwojobs: Informer
    localqueues: Informer
    jobs: Informer
    queue_configs: Informer
    cluster_queues: Informer
    enforce: bool = False
    #: How long to wait for an admitted Job to be stored before giving up on tracking it.
    track_timeout: float = 30.0

    def __post_init__(self) -> None:
        self._waiting: dict[tuple[str, str], asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self.jobs.add_handler(_Arrivals(self._waiting))
        self.deletes = DeleteFollower(self.client)

    async def mutate(self, review: Review) -> Verdict:
        job = review.object
        try:
            settings = self.settings()
        except Exception as e:  # noqa: BLE001 - KaiwoConfig missing or unreadable
            if not self._maybe_managed(job):
                return Verdict()
            return Verdict(False, 500, f"cannot adopt the Job: KaiwoConfig unavailable ({e})", "InternalError")
        user = review.username or UNKNOWN_USER
        result = mutation(job, settings, user, self.enforce)
        if result is None:
            return Verdict()
        mutated, ops = result
        name, ns = (mutated["metadata"].get("name") or ""), review.namespace
        if not name:
            # generateName: the apiserver picks the name after admission, so the
            # Job is recognised by the admission request's UID instead
            meta = mutated["metadata"]
            ops.append({"op": "replace" if "annotations" in meta else "add", "path": "/metadata/annotations",
                        "value": {**(meta.get("annotations") or {}), ADMISSION_ANNOTATION: review.uid}})
        refusal = self._queue_refusal(ns, mutated["metadata"]["labels"][LABEL_QUEUE_NAME])
        if refusal is not None:
            return refusal
        if not review.dry_run:
            key = (ns, name or UID_KEY + review.uid)
            fut = self._waiting.setdefault(key, asyncio.get_running_loop().create_future())  # before the Job can arrive
            task = asyncio.create_task(self._track(key, fut, user), name=f"track-job-{ns}/{name or review.uid}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return Verdict(patch=ops)

    async def _track(self, key: tuple[str, str], fut: asyncio.Future, user: str) -> None:
        """Create the tracking KaiwoJob once the admitted Job is stored."""
        ns, name = key
        cached = None if name.startswith(UID_KEY) else self.jobs.get(name, ns)
        try:
            job = cached if cached is not None else await asyncio.wait_for(asyncio.shield(fut), self.track_timeout)
        except asyncio.TimeoutError:
            log.info("admitted Job never appeared (refused later in admission?); nothing to track",
                     extra={"namespace": ns, "object": name})
            return
        finally:
            if self._waiting.get(key) is fut:
                del self._waiting[key]
        meta = job.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(LABEL_MANAGED) != "true" or controlled_by_kaiwojob(job) or meta.get("deletionTimestamp"):
            return
        try:
            # made only once the API server has stored the Job: a forged review makes nothing
            await self._ensure_local_queue(ns, labels.get(LABEL_QUEUE_NAME) or "")
            await self._ensure_kaiwojob(tracking_kaiwojob(unpacked(job), user))  # the cache packs the pod template
        except ApiError as e:
            log.error("cannot create the tracking KaiwoJob", extra={"namespace": ns, "object": name, "error": str(e)})

    def _maybe_managed(self, job: Mapping[str, Any]) -> bool:
        labels = (job.get("metadata") or {}).get("labels") or {}
        return labels.get(LABEL_MANAGED) == "true" or (self.enforce and LABEL_MANAGED not in labels)

    def _local_queue_decision(self, ns: str, queue: str) -> Any:
        # the one rule of both paths: a KaiwoJob and an adopted Job get a LocalQueue
        # (or are refused one) by the same KaiwoQueueConfig check
        return resolve_local_queue(
            ns, queue, self.queue_configs.get(QUEUE_CONFIG_NAME),
            local_queue_exists=self.localqueues.get(queue, ns) is not None, cluster_queue=self.cluster_queues.get(queue),
        )

    def _queue_refusal(self, ns: str, queue: str) -> Verdict | None:
        decision = self._local_queue_decision(ns, queue)
        if decision.action != "error":
            return None
        log.info("adopted Job refused its queue", extra={"namespace": ns, "queue": queue, "reason": decision.message})
        return Verdict.refuse([FieldError(f"metadata.labels[{LABEL_QUEUE_NAME}]", decision.message)], "Job")

    async def _ensure_local_queue(self, ns: str, queue: str) -> None:
        decision = self._local_queue_decision(ns, queue)
        if decision.action == "create" and decision.local_queue is not None:
            if await create_local_queue(self.client, decision.local_queue) is not None:
                log.info("LocalQueue created for an adopted Job", extra={"namespace": ns, "queue": queue})

    async def _ensure_kaiwojob(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        if self.kaiwojobs.get(meta["name"], meta["namespace"]) is not None:
            return
        try:
            await self.client.create(KAIWOJOBS, body)
            log.info("tracking KaiwoJob created", extra={"namespace": meta["namespace"], "object": meta["name"]})
        except ApiError as e:
            if not e.already_exists:
                raise

    async def validate(self, review: Review) -> Verdict:
        if review.operation == "DELETE":
            return await self._on_delete(review)
        if review.operation == "CREATE" and self.enforce:
            return self._enforce(review.object)
        return Verdict()

    def _enforce(self, job: Mapping[str, Any]) -> Verdict:
        labels = (job.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_MANAGED) == "true" or controlled_by_kaiwojob(job):
            return Verdict()
        if not job_requests_gpu(job, self.settings().default_gpu_resource_key):
            return Verdict()
        err = FieldError(f"metadata.labels[{LABEL_MANAGED}]", f"Required value: {ENFORCEMENT_MESSAGE}")
        return Verdict.refuse([err], "Job", (job.get("metadata") or {}).get("name", ""))

    async def _on_delete(self, review: Review) -> Verdict:
        # the review is only a pointer: the Job is read from the API server and
        # cleaned up once it shows the review's UID and a deletionTimestamp
        old = review.old_object
        meta = old.get("metadata") or {}
        if review.dry_run or controlled_by_kaiwojob(old) or FINALIZER not in (meta.get("finalizers") or ()):
            return Verdict()
        self.deletes.follow(review.namespace, meta.get("name") or review.raw.get("name") or "", meta.get("uid") or "")
        return Verdict()


class _Arrivals:
    """Resolves the waiter of a Job when the cache sees it (handlers do no I/O)."""

    def __init__(self, waiting: dict[tuple[str, str], asyncio.Future]) -> None:
        self.waiting = waiting

    def on_add(self, obj: Mapping[str, Any], initial: bool) -> None:
        if not self.waiting:
            return
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or ""
        uid = (meta.get("annotations") or {}).get(ADMISSION_ANNOTATION)
        for key in ((ns, meta.get("name") or ""), (ns, UID_KEY + uid) if uid else None):
            fut = self.waiting.get(key) if key else None
            if fut is not None and not fut.done():
                fut.set_result(obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.on_add(new, False)

    def on_delete(self, obj: Mapping[str, Any], tombstone: bool) -> None:
        pass


__all__ = ["FINALIZER", "JobWebhooks", "controlled_by_kaiwojob", "mutation", "tracking_kaiwojob"]
