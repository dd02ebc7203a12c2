"""The OpenAI-compatible routes on a real apiserver, with fake model servers on loopback."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from proxy_support import backends, create_model, proxy, server_pod  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration


async def test_models_listing_features_adapters_and_selectors(proxy, admin, namespace):
    create_model(admin, namespace, "chat1", adapters=[{"name": "sql", "url": "hf://o/sql"}], labels={"tenant": "x"}, owner="team")
    create_model(admin, namespace, "emb1", engine="Infinity", features=["TextEmbedding"])
    await proxy.wait_model(namespace, "chat1")
    await proxy.wait_model(namespace, "emb1")
    async with proxy.http.get(proxy.url + "/openai/v1/models") as r:
        data = (await r.json())["data"]
    ids = {d["id"] for d in data}
    assert {"chat1", "chat1_sql"} <= ids and "emb1" not in ids
    chat = next(d for d in data if d["id"] == "chat1")
    assert chat["object"] == "model" and chat["owned_by"] == "team" and chat["created"] > 0
    async with proxy.http.get(proxy.url + "/openai/v1/models?feature=TextEmbedding&feature=TextGeneration",
                              headers={"X-Label-Selector": "tenant=x"}) as r:
        assert {d["id"] for d in (await r.json())["data"]} == {"chat1", "chat1_sql"}
    async with proxy.http.get(proxy.url + "/openai/v1/models", headers={"X-Label-Selector": "tenant in (x"}) as r:
        assert r.status == 400 and "X-Label-Selector" in (await r.json())["error"]["message"]
    async with proxy.http.get(proxy.url + f"/{namespace}/chat1/v1/models") as r:
        assert [d["id"] for d in (await r.json())["data"]] == ["chat1", "chat1_sql"]


async def test_request_errors_are_json(proxy, admin, namespace):
    create_model(admin, namespace, "m1", autoscalingDisabled=True)
    await proxy.wait_model(namespace, "m1")
    cases = [
        ({"messages": []}, 400, "missing 'model'"),
        ({"model": "no-such-model"}, 404, "model not found"),
        ({"model": f"{namespace}/m1_nope"}, 404, "no adapter"),
        (b"{not json", 400, "not valid JSON"),
        (b"[1]", 400, "JSON object"),
    ]
    for body, status, text in cases:
        code, headers, raw = await proxy.post("/openai/v1/chat/completions", body,
                                              headers={"Content-Type": "application/json"} if isinstance(body, bytes) else {})
        err = orjson.loads(raw)["error"]
        assert code == status and text in err["message"] and err["code"] == status, raw
        assert headers["X-Proxy"] == "kaiwo-ctrl" and headers["Content-Type"] == "application/json"
    code, _, raw = await proxy.post("/openai/v1/audio/transcriptions", {"model": "m1"})
    assert code == 400 and b"multipart" in raw
    code, _, _ = await proxy.post("/openai/v1/files", {"model": "m1"})
    assert code == 404


async def test_same_name_in_two_namespaces_is_409_until_qualified(proxy, admin, namespace, backends):
    other = f"{namespace}-b"
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": other}})
    assert r.status_code == 201
    create_model(admin, namespace, "twin", autoscalingDisabled=True)
    create_model(admin, other, "twin", autoscalingDisabled=True)
    await proxy.wait_model(namespace, "twin")
    await proxy.wait_model(other, "twin")
    code, _, raw = await proxy.post("/openai/v1/completions", {"model": "twin", "prompt": "x"})
    err = orjson.loads(raw)["error"]
    assert code == 409 and err["namespaces"] == sorted([namespace, other])
    b = await backends("b-twin")
    server_pod(admin, other, "twin", b)
    await proxy.wait_endpoints(other, "twin", 1)
    code, _, raw = await proxy.post("/openai/v1/completions", {"model": f"{other}/twin", "prompt": "x"})
    assert code == 200, raw
    assert orjson.loads(raw)["model"] == "twin", "the namespace is taken off the forwarded model name"
    code, _, raw = await proxy.post(f"/{other}/twin/v1/completions?x=1", {"model": "anything", "prompt": "x"})
    assert code == 200 and orjson.loads(raw) == {"server": "b-twin", "model": "twin", "path": "/v1/completions?x=1"}


async def test_forwarding_headers_body_and_query(proxy, admin, namespace, backends):
    create_model(admin, namespace, "fw", autoscalingDisabled=True)
    b = await backends("fw")
    server_pod(admin, namespace, "fw", b)
    await proxy.wait_endpoints(namespace, "fw", 1)
    body = b'{"model":"fw",  "messages":[{"role":"user","content":"hi"}], "extra_field": {"kept": true}}'
    code, headers, raw = await proxy.post(
        "/openai/v1/chat/completions?api-version=1", body,
        headers={"Content-Type": "application/json", "Connection": "keep-alive, X-Hop", "X-Hop": "secret",
                 "X-Forwarded-For": "1.2.3.4", "Authorization": "Bearer t", "Host": "models.example"},
    )
    assert code == 200, raw
    got = b.requests[-1]
    assert got["body"] == body, "a body whose model needs no change is forwarded byte for byte"
    assert got["path"] == "/v1/chat/completions?api-version=1"
    h = {k.lower(): v for k, v in got["headers"].items()}
    assert "x-hop" not in h and "x-forwarded-for" not in h
    assert h["authorization"] == "Bearer t" and h["host"] == "models.example"
    assert headers["X-Proxy"] == "kaiwo-ctrl" and "X-Secret-Hop" not in headers


async def test_transcription_multipart_loses_its_model_part(proxy, admin, namespace, backends):
    create_model(admin, namespace, "whisper", engine="FasterWhisper", features=["SpeechToText"], autoscalingDisabled=True)
    b = await backends("whisper")
    server_pod(admin, namespace, "whisper", b)
    await proxy.wait_endpoints(namespace, "whisper", 1)
    boundary = "B0undary"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            f"Content-Type: audio/wav\r\n\r\nRIFFdata\r\n--{boundary}--\r\n").encode()
    code, _, raw = await proxy.post("/openai/v1/audio/transcriptions", form,
                                    headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert code == 200, raw
    sent = b.requests[-1]["body"]
    assert b'name="model"' not in sent and b"RIFFdata" in sent
    assert int(b.requests[-1]["headers"]["Content-Length"]) == len(sent)


async def test_adapter_requests_go_to_pods_with_the_adapter_and_wait_for_one(proxy, admin, namespace, backends):
    create_model(admin, namespace, "base", adapters=[{"name": "sql", "url": "hf://o/sql"}, {"name": "law", "url": "hf://o/law"}],
                 autoscalingDisabled=True)
    plain, with_sql = await backends("plain"), await backends("with-sql")
    server_pod(admin, namespace, "base", plain)
    sql_pod = server_pod(admin, namespace, "base", with_sql, adapters=["sql"])
    await proxy.wait_endpoints(namespace, "base", 2)
    for _ in range(4):
        code, _, raw = await proxy.post("/openai/v1/completions", {"model": "base_sql", "prompt": "x"})
        assert code == 200 and orjson.loads(raw) == {"server": "with-sql", "model": "sql", "path": "/v1/completions"}
    # nobody serves "law" yet: the request waits, and is released once a Pod gets the adapter label
    pending = asyncio.create_task(proxy.post("/openai/v1/completions", {"model": "base_law", "prompt": "x"}))
    await asyncio.sleep(0.5)
    assert not pending.done()
    from proxy_support import label_pod

    label_pod(admin, namespace, sql_pod, {"adapter.kubeai.org/other": "h"})  # an unrelated change: re-evaluated, still waiting
    await asyncio.sleep(0.3)
    assert not pending.done()
    label_pod(admin, namespace, sql_pod, {"adapter.kubeai.org/law": "h"})
    code, _, raw = await asyncio.wait_for(pending, 30)
    assert code == 200 and orjson.loads(raw)["model"] == "law"
    assert proxy.metric("kaiwo_proxy_active_requests", model_namespace=namespace, model_name="base") == 0


async def test_responses_route_forwards_like_chat_streaming_and_not(proxy, admin, namespace, backends):
    """``POST /openai/v1/responses`` (KubeAI 0.23): the engine gets ``/v1/responses`` with the
    body as sent (model rewritten only where the name needs it), answered whole or as SSE."""
    create_model(admin, namespace, "resp", autoscalingDisabled=True)
    b = await backends("resp")
    b.sse_chunks = 3
    server_pod(admin, namespace, "resp", b)
    await proxy.wait_endpoints(namespace, "resp", 1)
    body = b'{"model":"resp", "input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}], "store":false}'
    code, _, raw = await proxy.post("/openai/v1/responses", body, headers={"Content-Type": "application/json"})
    assert code == 200, raw
    assert orjson.loads(raw) == {"server": "resp", "model": "resp", "path": "/v1/responses"}
    got = b.requests[-1]
    assert got["path"] == "/v1/responses" and got["body"] == body, "forwarded byte for byte"
    # a namespace-qualified name is rewritten for the engine, every other field kept
    code, _, raw = await proxy.post("/openai/v1/responses", {"model": f"{namespace}/resp", "input": "x", "instructions": "be brief"})
    assert code == 200, raw
    assert orjson.loads(b.requests[-1]["body"]) == {"model": "resp", "input": "x", "instructions": "be brief"}
    # the path form, streaming
    async with proxy.http.post(proxy.url + f"/{namespace}/resp/v1/responses",
                               json={"model": "resp", "input": "stream it", "stream": True}) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        lines = [line async for line in r.content if line.startswith(b"data: ")]
    assert lines[-1] == b"data: [DONE]\n" and len(lines) == 4
    assert b.requests[-1]["path"] == "/v1/responses"
    assert orjson.loads(b.requests[-1]["body"]) == {"model": "resp", "input": "stream it", "stream": True}
    # bad bodies are the same 400s as on the other JSON routes; nothing reaches the engine
    sent = len(b.requests)
    for bad, text in ((b"{not json", "not valid JSON"), (b'{"input":"x"}', "missing 'model'"), (b'"x"', "JSON object")):
        code, _, raw = await proxy.post("/openai/v1/responses", bad, headers={"Content-Type": "application/json"})
        assert code == 400 and text in orjson.loads(raw)["error"]["message"], raw
    assert len(b.requests) == sent


async def test_responses_prefix_hash_keys_on_the_input_or_first_user_item(proxy, admin, namespace, backends):
    """PrefixHash hashes a Responses request's ``input`` string, or its first user item's
    text: the same conversation start goes to the same engine whichever shape it is sent in."""
    create_model(admin, namespace, "rph", autoscalingDisabled=True,
                 loadBalancing={"strategy": "PrefixHash", "prefixHash": {"prefixCharLength": 12}})
    bs = [await backends(f"rph{i}") for i in range(3)]
    for b in bs:
        server_pod(admin, namespace, "rph", b)
    await proxy.wait_endpoints(namespace, "rph", 3)
    home: dict[str, str] = {}
    for t in range(24):
        start = f"tenant-{t:03d} | "
        shapes = [
            {"model": "rph", "input": start + "plain string input"},
            {"model": "rph", "input": [{"role": "system", "content": "sys"}, {"role": "user", "content": start + "as an item"}]},
            {"model": "rph", "input": [{"type": "message", "role": "user",
                                        "content": [{"type": "input_text", "text": start + "as parts"}]}], "stream": False},
        ]
        for body in shapes:
            code, _, raw = await proxy.post("/openai/v1/responses", body)
            assert code == 200, raw
            server = orjson.loads(raw)["server"]
            assert home.setdefault(start[:12], server) == server, (t, body)
    assert len(set(home.values())) == 3, "different conversation starts spread over the engines"
    assert sum(len(b.requests) for b in bs) == 72
    assert all(r["path"] == "/v1/responses" for b in bs for r in b.requests)
