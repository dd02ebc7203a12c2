"""The deletion path of a Model with a cache profile (CacheManager.finalize),
step by step with a recording client: which writes happen in which order when
a write fails half-way, and with an earlier Model's Job in the way."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.api.apitypes import ApiError
from kaiwo_ctrl.runtime.control.expectations import Expectations
from kaiwo_ctrl.serving.model.cache import FINALIZER, PVC_ANNOTATION_PREFIX, CacheManager, evict_job_name, pvc_name
from kaiwo_ctrl.serving.model.config import parse_config

NS, NAME, UID, PROFILE = "team", "m", "uid-1", "fast"
CONFIG = parse_config({"cacheProfiles": {PROFILE: {"sharedFilesystem": {"storageClassName": "s"}}}})


class Cache:
    def __init__(self) -> None:
        self.items: dict[str, dict] = {}

    def get(self, name: str, namespace: str | None = None) -> dict | None:
        return self.items.get(name)


@dataclass
class Client:
    """Records writes as (verb, kind, name); ``fail`` maps a (verb, kind) to errors raised in turn."""

    calls: list[tuple[str, str, str]] = field(default_factory=list)
    fail: dict[tuple[str, str], list[ApiError]] = field(default_factory=dict)

    def _do(self, verb: str, kind: str, name: str) -> dict:
        errors = self.fail.get((verb, kind)) or []
        if errors:
            raise errors.pop(0)
        self.calls.append((verb, kind, name))
        if (verb, kind) == ("patch", "Model"):  # the finalizer released: the answer holds no finalizer
            return {**deleting_model(), "metadata": {**deleting_model()["metadata"], "resourceVersion": "2", "finalizers": None}}
        return {"metadata": {"name": name, "resourceVersion": "2"}}

    async def create(self, res: Any, body: dict) -> dict:
        return self._do("create", res.kind, body["metadata"]["name"])

    async def patch(self, res: Any, name: str, patch: dict, ns: str | None = None) -> dict:
        return self._do("patch", res.kind, name)

    async def delete(self, res: Any, name: str, ns: str | None = None, **_: Any) -> dict:
        return self._do("delete", res.kind, name)


class Events:
    def normal(self, *a: Any) -> None: ...
    def warning(self, *a: Any) -> None: ...


class Source:
    current = CONFIG


@dataclass
class Host:
    client: Client = field(default_factory=Client)
    events: Events = field(default_factory=Events)
    source: Source = field(default_factory=Source)
    jobs: Cache = field(default_factory=Cache)
    pvcs: Cache = field(default_factory=Cache)
    expectations: Expectations = field(default_factory=Expectations)

    def namespace_config(self, ns: str) -> None:
        return None


def deleting_model() -> dict:
    return {
        "apiVersion": "kubeai.org/v1",
        "kind": "Model",
        "metadata": {"name": NAME, "namespace": NS, "uid": UID, "resourceVersion": "1",
                     "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": [FINALIZER]},
        "spec": {"cacheProfile": PROFILE, "url": "s3://b/m"},
    }


def completed(job_owner_uid: str) -> dict:
    return {
        "metadata": {"name": evict_job_name(NAME), "namespace": NS, "ownerReferences": [
            {"apiVersion": "kubeai.org/v1", "kind": "Model", "name": NAME, "uid": job_owner_uid, "controller": True}]},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }


def host_with_pvc() -> Host:
    host = Host()
    host.pvcs.items[pvc_name(PROFILE)] = {"metadata": {"name": pvc_name(PROFILE), "annotations": {
        PVC_ANNOTATION_PREFIX + NAME: '{"uid": "uid-1"}'}}}
    return host


def apply_deletes(host: Host) -> None:
    """What the informer shows once the Job deletes have landed."""
    for verb, kind, name in host.client.calls:
        if (verb, kind) == ("delete", "Job"):
            host.jobs.items.pop(name, None)


def test_a_failed_finalizer_release_never_starts_a_second_eviction():
    host = host_with_pvc()
    cache = CacheManager(host)  # type: ignore[arg-type]
    asyncio.run(cache.finalize(deleting_model(), []))
    assert host.client.calls == [("create", "Job", evict_job_name(NAME))]

    host.jobs.items[evict_job_name(NAME)] = completed(UID)
    host.client.fail[("patch", "Model")] = [ApiError(409, {"reason": "Conflict", "message": "stale"})]
    try:
        asyncio.run(cache.finalize(deleting_model(), []))
    except ApiError as e:
        assert e.conflict
    else:
        raise AssertionError("the conflict is raised for a retry")
    apply_deletes(host)

    asyncio.run(cache.finalize(deleting_model(), []))  # the retry
    creates = [c for c in host.client.calls if c[0] == "create"]
    assert creates == [("create", "Job", evict_job_name(NAME))], host.client.calls
    tail = host.client.calls[-2:]
    assert tail == [("patch", "Model", NAME), ("delete", "Job", evict_job_name(NAME))], host.client.calls


def test_the_eviction_job_is_deleted_on_the_pass_that_sees_it_complete():
    host = host_with_pvc()
    host.jobs.items[evict_job_name(NAME)] = completed(UID)
    asyncio.run(CacheManager(host).finalize(deleting_model(), []))  # type: ignore[arg-type]
    assert host.client.calls == [
        ("patch", "PersistentVolumeClaim", pvc_name(PROFILE)),
        ("patch", "Model", NAME),
        ("delete", "Job", evict_job_name(NAME)),
    ]


def test_leftover_jobs_are_deleted_once_the_finalizer_is_gone():
    host = host_with_pvc()
    host.jobs.items[evict_job_name(NAME)] = completed(UID)
    model = deleting_model()
    model["metadata"]["finalizers"] = ["someone-else/hold"]
    asyncio.run(CacheManager(host).finalize(model, []))  # type: ignore[arg-type]
    assert host.client.calls == [("delete", "Job", evict_job_name(NAME))]


def test_an_earlier_models_completed_job_is_not_taken_for_this_ones_eviction():
    host = host_with_pvc()
    host.jobs.items[evict_job_name(NAME)] = completed("uid-of-an-earlier-model")
    cache = CacheManager(host)  # type: ignore[arg-type]
    asyncio.run(cache.finalize(deleting_model(), []))
    assert host.client.calls == [("delete", "Job", evict_job_name(NAME))]  # removed; finalizer kept
    apply_deletes(host)
    asyncio.run(cache.finalize(deleting_model(), []))
    assert host.client.calls[-1] == ("create", "Job", evict_job_name(NAME))


def test_a_pass_on_the_stale_model_after_the_release_starts_no_second_eviction():
    """The Job cache shows the eviction Job deleted before the Model cache shows the
    finalizer released: the next pass, reading the Model through read-your-writes,
    neither makes a new eviction Job nor patches the Model again."""
    host = host_with_pvc()
    host.jobs.items[evict_job_name(NAME)] = completed(UID)
    cache = CacheManager(host)  # type: ignore[arg-type]
    asyncio.run(cache.finalize(deleting_model(), []))
    apply_deletes(host)
    released = len(host.client.calls)
    stale = deleting_model()  # the Model cache still holds the finalizer
    asyncio.run(cache.finalize(host.expectations.view((MODELS.kind, NS, NAME), stale), []))
    assert host.client.calls[released:] == [], host.client.calls
    # without the record, the same stale pass would start a second eviction
    fresh = host_with_pvc()
    asyncio.run(CacheManager(fresh).finalize(stale, []))  # type: ignore[arg-type]
    assert fresh.client.calls == [("create", "Job", evict_job_name(NAME))]
