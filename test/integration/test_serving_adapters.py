"""LoRA adapters loaded and unloaded live: the controller, the real adapter-loader
sidecar app, and a fake vLLM HTTP server recording its calls, on a loopback address."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from aiohttp import web

from kaiwo_ctrl.local.controlplane import free_port
from kaiwo_ctrl.serving.model.adapterloader import make_app
from kaiwo_ctrl.serving.model.adapters import url_hash
from test_serving_support import (  # noqa: F401 - fixtures
    MERGE,
    condition,
    create_model,
    eventually,
    get_model,
    list_pods,
    patch_model,
    serving_op,
    server,
    wait_pods,
)

pytestmark = pytest.mark.integration


class FakeVLLM:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.loaded: set[str] = set()
        app = web.Application()
        app.router.add_post("/v1/load_lora_adapter", self.load)
        app.router.add_post("/v1/unload_lora_adapter", self.unload)
        self.app = app

    async def load(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("load", body))
        if body["lora_name"] in self.loaded:
            return web.Response(status=400, text=f"The lora adapter '{body['lora_name']}' has already been loaded.")
        self.loaded.add(body["lora_name"])
        return web.Response(text="ok")

    async def unload(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("unload", body))
        if body["lora_name"] not in self.loaded:
            return web.Response(status=400, text=f"The lora adapter '{body['lora_name']}' cannot be found.")
        self.loaded.discard(body["lora_name"])
        return web.Response(text="ok")


async def _serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def fake_fetch(url: str, target: Path) -> int:
    """Stands in for the object store: one file naming the source."""
    (target / "adapter_config.json").write_text(url)
    return 1


async def test_adapters_loaded_and_unloaded_live(serving_op, admin, namespace, tmp_path):
    host = f"127.0.0.{random.randint(20, 250)}"
    vllm = FakeVLLM()
    vllm_port, loader_port = free_port(), free_port()
    runners = [await _serve(vllm.app, host, vllm_port), await _serve(make_app(tmp_path / "adapters", fake_fetch), host, loader_port)]
    try:
        adapters = [{"name": "sql", "url": "hf://org/sql-lora"}, {"name": "chat", "url": "s3://b/chat"}]
        create_model(admin, namespace, "lora", adapters=adapters)
        [pod] = await wait_pods(admin, namespace, "lora", 1)
        c = server(pod)
        assert c["args"][-1] == "--enable-lora"
        assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in c["env"]
        sidecar = next(x for x in pod["spec"]["containers"] if x["name"] == "loader")
        assert sidecar["command"][:2] == ["kaiwo-ctrl", "adapter-loader"]
        # the Pod "runs" on the loopback address; the ports point at the test servers (metadata: no rollout)
        name = pod["metadata"]["name"]
        r = admin.patch(f"/api/v1/namespaces/{namespace}/pods/{name}", headers=MERGE, json={"metadata": {"annotations": {
            "model-pod-port": str(vllm_port), "adapter-loader-port": str(loader_port)}}})
        assert r.status_code == 200, r.text
        status = {"podIP": host, "podIPs": [{"ip": host}], "phase": "Running", "containerStatuses": [
            {"name": n, "ready": True, "restartCount": 0, "image": "x", "imageID": "", "state": {"running": {}}}
            for n in ("server", "loader")]}
        r = admin.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", headers=MERGE, json={"status": status})
        assert r.status_code == 200, r.text

        def labels():
            [p] = list_pods(admin, namespace, "lora")
            return {k: v for k, v in p["metadata"]["labels"].items() if k.startswith("adapter.kubeai.org/")}

        await eventually(lambda: labels() == {"adapter.kubeai.org/sql": url_hash("hf://org/sql-lora"),
                                              "adapter.kubeai.org/chat": url_hash("s3://b/chat")}, what="adapter labels")
        assert sorted(b["lora_name"] for op, b in vllm.calls if op == "load") == ["chat", "sql"]
        assert ("load", {"lora_name": "sql", "lora_path": "/adapters/sql"}) in vllm.calls
        assert (tmp_path / "adapters" / "sql" / "adapter_config.json").read_text() == "hf://org/sql-lora"

        # remove one adapter: unloaded from vLLM and the sidecar, label dropped, no rollout
        patch_model(admin, namespace, "lora", {"spec": {"adapters": [adapters[0]]}})
        await eventually(lambda: labels() == {"adapter.kubeai.org/sql": url_hash("hf://org/sql-lora")}, what="chat unloaded")
        assert ("unload", {"lora_name": "chat"}) in vllm.calls
        assert not (tmp_path / "adapters" / "chat").exists()
        assert [p["metadata"]["name"] for p in list_pods(admin, namespace, "lora")] == [name]
        assert vllm.loaded == {"sql"}
    finally:
        for r in runners:
            await r.cleanup()


class Hanging:
    """A model Pod's ports that accept connections and never answer; records who
    connected and how many connections were open at once."""

    def __init__(self) -> None:
        self.open = self.peak = self.total = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.total += 1
        self.peak = max(self.peak, self.open)
        try:
            while await reader.read(65536):  # until the caller gives up and closes
                pass
        except ConnectionError:
            pass
        finally:
            self.open -= 1
            writer.close()


def _run_pod(admin, ns: str, pod: dict, host: str, port: int) -> None:
    """The Pod "runs" on ``host``, its server and loader ports both at ``port``, loader Ready."""
    name = pod["metadata"]["name"]
    r = admin.patch(f"/api/v1/namespaces/{ns}/pods/{name}", headers=MERGE, json={"metadata": {"annotations": {
        "model-pod-port": str(port), "adapter-loader-port": str(port)}}})
    assert r.status_code == 200, r.text
    status = {"podIP": host, "podIPs": [{"ip": host}], "phase": "Running", "containerStatuses": [
        {"name": n, "ready": True, "restartCount": 0, "image": "x", "imageID": "", "state": {"running": {}}}
        for n in ("server", "loader")]}
    r = admin.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", headers=MERGE, json={"status": status})
    assert r.status_code == 200, r.text


async def test_hanging_adapter_loaders_in_one_namespace_do_not_stall_another(serving_op, admin, namespace):
    """Attack: six Models in namespace A, one LoRA adapter each, whose Pods accept
    connections on the adapter-loader port and never answer (the controller runs
    2 workers here). Another namespace's new Model still gets its Pod and scales;
    A's Models say which adapter failed; A's Pods never see more than the
    per-namespace bound of calls at once."""
    host = f"127.0.0.{random.randint(20, 250)}"
    hang = Hanging()
    port = free_port()
    srv = await asyncio.start_server(hang.handle, host, port)
    other = f"{namespace}-b"
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": other}})
    assert r.status_code == 201, r.text
    try:
        names = [f"lora-{i}" for i in range(6)]
        for n in names:
            create_model(admin, namespace, n, adapters=[{"name": "sql", "url": f"hf://org/{n}"}])
        for n in names:
            [pod] = await wait_pods(admin, namespace, n, 1)
            _run_pod(admin, namespace, pod, host, port)
        await eventually(lambda: hang.total >= 2, what="the hanging loaders are being called")

        # the victim: its Pod is made, and it scales, while A's loads hang
        create_model(admin, other, "victim")
        await wait_pods(admin, other, "victim", 1, timeout=120)
        patch_model(admin, other, "victim", {"spec": {"minReplicas": 2, "replicas": 2}})
        await wait_pods(admin, other, "victim", 2, timeout=120)

        # every A Model reports its failed adapter, by name
        def failed(n: str) -> bool:
            c = condition(get_model(admin, namespace, n), "AdaptersLoaded")
            return c is not None and c[:2] == ("False", "LoadFailed") and "adapter sql on Pod" in c[2]

        await eventually(lambda: all(failed(n) for n in names), timeout=180, what="AdaptersLoaded=False naming the adapter")
        assert hang.peak <= 2  # --adapter-calls-per-namespace (default 2): A never had more calls at once
        assert hang.total >= 6  # every Model's Pod was tried
        assert all(not any(k.startswith("adapter.kubeai.org/") for k in list_pods(admin, namespace, n)[0]["metadata"]["labels"])
                   for n in names)  # nothing loaded is claimed
    finally:
        srv.close()
        admin.delete(f"/api/v1/namespaces/{other}")
