"""LoRA adapters loaded and unloaded live: the controller, the real adapter-loader
sidecar app, and a fake vLLM HTTP server recording its calls, on a loopback address."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from aiohttp import web

from kaiwo_ctrl.local.controlplane import free_port
from kaiwo_ctrl.serving.adapterloader import make_app
from kaiwo_ctrl.serving.adapters import url_hash
from test_serving_support import (  # noqa: F401 - fixtures
    MERGE,
    create_model,
    eventually,
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
