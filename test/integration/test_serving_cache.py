"""Cache profiles on the real kube-apiserver: PVC, finalizer, loader Job, Pods, eviction.

No Job controller runs: the test completes the loader and evict Jobs through
``jobs/status``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from test_serving_support import (  # noqa: F401 - fixtures
    MERGE,
    condition,
    create_model,
    eventually,
    get_model,
    list_pods,
    models_url,
    serving_op,
    server,
    wait_pods,
)

pytestmark = pytest.mark.integration


def complete_job(admin, ns: str, name: str) -> None:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "startTime": now,
        "completionTime": now,
        "succeeded": 1,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now, "lastProbeTime": now},
            {"type": "Complete", "status": "True", "lastTransitionTime": now, "lastProbeTime": now},
        ],
    }
    r = admin.patch(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status", json={"status": status}, headers=MERGE)
    assert r.status_code == 200, r.text


def get_or_none(admin, url: str) -> dict | None:
    r = admin.get(url)
    return r.json() if r.status_code == 200 else None


async def test_cache_lifecycle_with_eviction_and_finalizer(serving_op, admin, namespace):
    m = create_model(admin, namespace, "cached", url="s3://bucket/models/x", cacheProfile="fast", env={"AWS_ENDPOINT_URL": "http://s3"})
    uid = m["metadata"]["uid"]
    pvc_url = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/shared-model-cache-fast"
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    pvc = await eventually(lambda: get_or_none(admin, pvc_url), what="shared PVC")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and pvc["spec"]["storageClassName"] == "standard"
    assert not pvc["metadata"].get("ownerReferences")
    job = await eventually(lambda: get_or_none(admin, f"{jobs}/load-cache-cached"), what="loader Job")
    assert job["metadata"]["ownerReferences"][0]["uid"] == uid
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["name"] == "loader" and c["image"] == "registry.test/kaiwo-ctrl:test"
    assert c["command"] == ["kaiwo-ctrl", "download", "model"]
    assert c["args"] == ["s3://bucket/models/x", f"/models/cached-{uid}"]
    assert [e["name"] for e in c["env"]] == ["AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    assert c["volumeMounts"] == [{"name": "model", "mountPath": f"/models/cached-{uid}", "subPath": f"models/cached-{uid}"}]
    model = await eventually(lambda: condition(x := get_model(admin, namespace, "cached"), "CacheLoaded") and x,
                             what="CacheLoaded condition")
    assert "kubeai.org/cache-eviction" in model["metadata"]["finalizers"]
    assert condition(model, "CacheLoaded")[0] == "False" and model["status"]["cache"] == {"loaded": False}
    assert list_pods(admin, namespace, "cached") == []  # no Pods before the cache is loaded

    complete_job(admin, namespace, "load-cache-cached")
    [pod] = await wait_pods(admin, namespace, "cached", 1)
    s = server(pod)
    assert s["args"][0] == f"--model=/models/cached-{uid}" and "--load-format=runai_streamer" not in s["args"]
    mount = next(x for x in s["volumeMounts"] if x["name"] == "models")
    assert mount == {"name": "models", "mountPath": f"/models/cached-{uid}", "subPath": f"models/cached-{uid}", "readOnly": True}
    pvc = admin.get(pvc_url).json()
    assert json.loads(pvc["metadata"]["annotations"]["models.kubeai.org/cached"])["uid"] == uid
    await eventually(lambda: (get_model(admin, namespace, "cached").get("status") or {}).get("cache") == {"loaded": True},
                     what="status.cache.loaded")
    await eventually(lambda: get_or_none(admin, f"{jobs}/load-cache-cached") is None
                     or get_or_none(admin, f"{jobs}/load-cache-cached")["metadata"].get("deletionTimestamp"),
                     what="loader Job deleted")

    # deletion: Pods deleted, evict Job, annotation removed, finalizer dropped
    admin.delete(models_url(namespace, "cached"))
    await wait_pods(admin, namespace, "cached", 0)
    evict = await eventually(lambda: get_or_none(admin, f"{jobs}/evict-cache-cached"), what="evict Job")
    ec = evict["spec"]["template"]["spec"]["containers"][0]
    assert ec["name"] == "evictor" and ec["command"] == ["rm", "-rf", f"/models/cached-{uid}"]
    assert ec["volumeMounts"] == [{"name": "model", "mountPath": "/models", "subPath": "models"}]
    assert get_or_none(admin, models_url(namespace, "cached")) is not None  # held by the finalizer
    complete_job(admin, namespace, "evict-cache-cached")
    await eventually(lambda: get_or_none(admin, models_url(namespace, "cached")) is None, what="Model gone")
    pvc = admin.get(pvc_url).json()
    assert "models.kubeai.org/cached" not in (pvc["metadata"].get("annotations") or {})
    # deleted by the operator on completion: no garbage collector or TTL controller runs here
    await eventually(lambda: get_or_none(admin, f"{jobs}/evict-cache-cached") is None, what="evict Job deleted")


async def test_missing_cache_profile_is_a_condition(serving_op, admin, namespace):
    create_model(admin, namespace, "nocache", url="hf://org/x", cacheProfile="missing")
    model = await eventually(lambda: condition(x := get_model(admin, namespace, "nocache"), "ConfigValid") and x,
                             what="ConfigValid")
    assert condition(model, "ConfigValid")[0] == "False" and "spec.cacheProfile" in condition(model, "ConfigValid")[2]
    assert list_pods(admin, namespace, "nocache") == []


def fail_job(admin, ns: str, name: str) -> None:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    failed = {"reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit",
              "lastTransitionTime": now, "lastProbeTime": now}
    status = {"startTime": now, "failed": 1, "conditions": [{"type": "FailureTarget", "status": "True", **failed},
                                                            {"type": "Failed", "status": "True", **failed}]}
    r = admin.patch(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status", json={"status": status}, headers=MERGE)
    assert r.status_code == 200, r.text


async def test_failed_loader_job_is_a_condition_naming_it(serving_op, admin, namespace):
    create_model(admin, namespace, "broken", url="hf://org/missing", cacheProfile="fast")
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    first = await eventually(lambda: get_or_none(admin, f"{jobs}/load-cache-broken"), what="loader Job")
    fail_job(admin, namespace, "load-cache-broken")
    model = await eventually(lambda: (c := condition(x := get_model(admin, namespace, "broken"), "CacheLoaded"))
                             and c[1] == "LoaderFailed" and x, what="CacheLoaded=False/LoaderFailed")
    status, _, message = condition(model, "CacheLoaded")
    assert status == "False" and "load-cache-broken" in message and "BackoffLimitExceeded" in message
    assert condition(model, "Ready")[:2] == ("False", "CacheLoadFailed") and model["status"]["cache"] == {"loaded": False}
    assert list_pods(admin, namespace, "broken") == []
    events = await eventually(lambda: admin.get(f"/api/v1/namespaces/{namespace}/events", params={
        "fieldSelector": "involvedObject.name=broken,reason=CacheLoadFailed"}).json()["items"], what="CacheLoadFailed event")
    assert events[0]["type"] == "Warning" and "load-cache-broken" in events[0]["message"]

    # fixing the Model (the URL is immutable with a cache profile; its env is not) replaces
    # the failed loader with one built from the new spec
    r = admin.patch(models_url(namespace, "broken"), json={"spec": {"env": {"HF_ENDPOINT": "https://mirror.test"}}},
                    headers=MERGE)
    assert r.status_code == 200, r.text
    second = await eventually(lambda: (j := get_or_none(admin, f"{jobs}/load-cache-broken"))
                              and j["metadata"]["uid"] != first["metadata"]["uid"] and j, what="a new loader Job")
    assert {"name": "HF_ENDPOINT", "value": "https://mirror.test"} in second["spec"]["template"]["spec"]["containers"][0]["env"]
    await eventually(lambda: (condition(get_model(admin, namespace, "broken"), "CacheLoaded") or ("",))[1:2] == ("Loading",),
                     what="CacheLoaded back to Loading")
