"""Admission rules V1-V17 of the Model CRD on the real kube-apiserver: each refused,
and its boundary accepted."""

from __future__ import annotations

import copy
import uuid

import pytest

pytestmark = pytest.mark.integration


def _model(name: str | None = None, **spec) -> dict:
    base = {"url": "hf://org/model", "engine": "VLLM", "features": []}
    base.update(spec)
    return {"apiVersion": "kubeai.org/v1", "kind": "Model",
            "metadata": {"name": name or f"m-{uuid.uuid4().hex[:8]}"}, "spec": {k: v for k, v in base.items() if v is not None}}


def _url(ns: str, name: str = "") -> str:
    return f"/apis/kubeai.org/v1/namespaces/{ns}/models" + (f"/{name}" if name else "")


def _files(n: int) -> list[dict]:
    return [{"path": f"/f/{i}", "content": "x"} for i in range(n)]


def _adapters(n: int) -> list[dict]:
    return [{"name": f"a-{i}", "url": f"hf://o/a{i}"} for i in range(n)]


REFUSED = [
    ("V1 name > 40", _model("a" * 41), "at most 40"),
    ("V2 url missing", _model(url=None), "spec.url: Required"),
    ("V2 url scheme", _model(url="http://x/y"), "url must start with"),
    ("V3 engine missing", _model(engine=None), "spec.engine: Required"),
    ("V3 engine enum", _model(engine="TGI"), "Unsupported value"),
    ("V4 features missing", _model(features=None), "spec.features: Required"),
    ("V4 feature enum", _model(features=["Chat"]), "Unsupported value"),
    ("V5 cacheProfile with pvc", _model(url="pvc://c", cacheProfile="fast"), "cacheProfile is only supported"),
    ("V5 cacheProfile with ollama", _model(url="ollama://m", engine="OLlama", cacheProfile="fast"), "cacheProfile is only supported"),
    ("V6 gs without cache", _model(url="gs://b/p"), "gs:// urls require a cacheProfile"),
    ("V7 oss without cache", _model(url="oss://b/p"), "oss:// urls require a cacheProfile"),
    ("V8 min > max", _model(minReplicas=3, maxReplicas=2), "minReplicas must be less than or equal to maxReplicas"),
    ("V9 adapters not VLLM", _model(engine="OLlama", url="ollama://m", adapters=[{"name": "a", "url": "hf://o/a"}]),
     "adapters are only supported with engine VLLM"),
    ("V13 duplicate paths", _model(files=[{"path": "/a", "content": "1"}, {"path": "/a", "content": "2"}]), "must be unique"),
    ("V14 relative path", _model(files=[{"path": "a.txt", "content": "1"}]), "must be absolute"),
    ("V14 colon", _model(files=[{"path": "/a:b", "content": "1"}]), "must not contain ':'"),
    ("V15 too many files", _model(files=_files(11)), "must have at most 10 items"),
    ("V15 content too long", _model(files=[{"path": "/a", "content": "x" * 100001}]), "may not be more than 100000"),
    ("V15 path too long", _model(files=[{"path": "/" + "a" * 1024, "content": ""}]), "may not be more than 1024"),
    ("V16 adapter name", _model(adapters=[{"name": "Bad_Name", "url": "hf://o/a"}]), "should match"),
    ("V16 adapter name length", _model(adapters=[{"name": "a" * 64, "url": "hf://o/a"}]), "may not be more than 63"),
    ("V16 adapter url", _model(adapters=[{"name": "a", "url": "pvc://x"}]), "adapters[].url must start with"),
    # KubeAI sets no bound; each adapter is a load on every server Pod
    ("V18 too many adapters", _model(adapters=_adapters(257)), "must have at most 256 items"),
    ("V17 minReplicas", _model(minReplicas=-1), "should be greater than or equal to 0"),
    ("V17 maxReplicas", _model(maxReplicas=0), "should be greater than or equal to 1"),
    ("V17 targetRequests", _model(targetRequests=0), "should be greater than or equal to 1"),
    ("V17 meanLoadFactor", _model(loadBalancing={"prefixHash": {"meanLoadFactor": 99}}), "should be greater than or equal to 100"),
]

ACCEPTED = [
    ("V1 name = 40", _model("a" * 40)),
    ("V2 every scheme", _model(url="pvc://claim/sub")),
    ("V3 FasterWhisper", _model(engine="FasterWhisper")),
    ("V4 empty features", _model(features=[])),
    ("V5 cacheProfile with hf", _model(cacheProfile="fast")),
    ("V6 gs with cache", _model(url="gs://b/p", cacheProfile="fast")),
    ("V7 oss with cache", _model(url="oss://b/p", cacheProfile="fast")),
    ("s3 without cache", _model(url="s3://b/p")),
    ("V8 min = max", _model(minReplicas=2, maxReplicas=2)),
    ("V9 adapters with VLLM", _model(adapters=[{"name": "a-1", "url": "s3://b/a"}])),
    ("V13-15 ten files at the limits", _model(files=[{"path": "/" + "a" * 1023, "content": "x" * 100000}] + _files(9))),
    ("V16 adapter name 63", _model(adapters=[{"name": "a" * 63, "url": "gs://b/a"}])),
    ("V18 256 adapters", _model(adapters=_adapters(256))),
    ("V17 minimums", _model(minReplicas=0, maxReplicas=1, targetRequests=1,
                            loadBalancing={"prefixHash": {"meanLoadFactor": 100}})),
]


@pytest.mark.parametrize("case,obj,message", REFUSED, ids=[c for c, _, _ in REFUSED])
def test_refused(admin, namespace, case, obj, message):
    r = admin.post(_url(namespace), json=obj)
    assert r.status_code == 422, f"{case}: {r.status_code} {r.text[:300]}"
    assert message in r.json()["message"], r.json()["message"]


@pytest.mark.parametrize("case,obj", ACCEPTED, ids=[c for c, _ in ACCEPTED])
def test_boundary_accepted(admin, namespace, case, obj):
    r = admin.post(_url(namespace), json=obj)
    assert r.status_code == 201, f"{case}: {r.text[:500]}"


def test_transition_rules(admin, namespace):
    """V10-V12: url immutable while cached, cacheProfile and replication immutable; other edits pass."""
    r = admin.post(_url(namespace), json=_model("t", url="s3://b/m", cacheProfile="fast"))
    assert r.status_code == 201, r.text
    obj = r.json()

    def put(mutate) -> tuple[int, str]:
        o = copy.deepcopy(obj)
        mutate(o["spec"])
        resp = admin.put(_url(namespace, "t"), json=o)
        return resp.status_code, resp.text

    code, text = put(lambda s: s.update(url="s3://b/other"))
    assert code == 422 and "url cannot be changed while a cacheProfile is set" in text  # V10
    code, text = put(lambda s: s.update(cacheProfile="slow"))
    assert code == 422 and "cacheProfile is immutable" in text  # V11
    code, text = put(lambda s: s["loadBalancing"]["prefixHash"].update(replication=7))
    assert code == 422 and "replication is immutable" in text  # V12
    code, text = put(lambda s: s["loadBalancing"]["prefixHash"].update(meanLoadFactor=150))
    assert code == 200, text

    # without a cache profile the url may change
    r = admin.post(_url(namespace), json=_model("u", url="hf://a/b"))
    assert r.status_code == 201, r.text
    o = r.json()
    o["spec"]["url"] = "hf://a/c"
    assert admin.put(_url(namespace, "u"), json=o).status_code == 200
