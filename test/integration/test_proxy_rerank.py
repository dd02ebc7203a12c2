"""Reranking (KubeAI 0.22): the feature in the Model CRD, the /rerank route, the models filter.

The Model is KubeAI's published catalog entry ``bge-rerank-base-cpu``
(manifests/models/), field for field; it was refused before the feature existed.
"""

from __future__ import annotations

import orjson
import pytest

from proxy_support import backends, proxy, server_pod  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration

# KubeAI's catalog entry, as published (an Infinity reranker on one CPU, scaled from zero)
BGE_RERANK = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "bge-rerank-base-cpu"},
              "spec": {"features": ["Reranking"], "url": "hf://BAAI/bge-reranker-base", "engine": "Infinity",
                       "minReplicas": 0, "resourceProfile": "cpu:1"}}


async def test_kubeai_rerank_model_applies_and_is_served_on_rerank(proxy, admin, namespace, backends):
    r = admin.post(f"/apis/kubeai.org/v1/namespaces/{namespace}/models", json=BGE_RERANK)
    assert r.status_code == 201, r.text
    r = admin.post(f"/apis/kubeai.org/v1/namespaces/{namespace}/models",
                   json={**BGE_RERANK, "metadata": {"name": "bad"}, "spec": {**BGE_RERANK["spec"], "features": ["Rerank"]}})
    assert r.status_code == 422 and "features" in r.text
    await proxy.wait_model(namespace, "bge-rerank-base-cpu")
    async with proxy.http.get(proxy.url + "/openai/v1/models?feature=Reranking") as resp:
        ids = [m["id"] for m in (await resp.json())["data"]]
    assert ids == ["bge-rerank-base-cpu"]
    async with proxy.http.get(proxy.url + "/openai/v1/models") as resp:
        assert "bge-rerank-base-cpu" not in [m["id"] for m in (await resp.json())["data"]], "TextGeneration by default"
    b = await backends("infinity")
    admin.patch(f"/apis/kubeai.org/v1/namespaces/{namespace}/models/bge-rerank-base-cpu", json={"spec": {"replicas": 1}},
                headers={"Content-Type": "application/merge-patch+json"})
    server_pod(admin, namespace, "bge-rerank-base-cpu", b)
    await proxy.wait_endpoints(namespace, "bge-rerank-base-cpu", 1)
    body = {"model": "bge-rerank-base-cpu", "query": "apples?", "documents": ["an apple a day", "oranges"], "top_n": 1}
    code, _, raw = await proxy.post("/openai/v1/rerank", body)
    assert code == 200, raw
    assert b.requests[-1]["path"] == "/v1/rerank" and orjson.loads(b.requests[-1]["body"]) == body
    code, _, raw = await proxy.post(f"/{namespace}/bge-rerank-base-cpu/v1/rerank", {"query": "q", "documents": ["d"]})
    assert code == 200 and b.requests[-1]["path"] == "/v1/rerank"
    async with proxy.http.get(proxy.url + "/openai/v1/rerank") as resp:
        assert resp.status == 405
