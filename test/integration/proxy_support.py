"""Shared pieces of the proxy integration tests.

* :class:`FakeOpenAI` - a fake OpenAI-compatible model server on a loopback
  address (127.0.0.11, 127.0.0.12, ...): it records what it receives, answers
  JSON or SSE, can hold requests or fail a number of times.
* Models and model server Pods on the real apiserver; a Pod is made Ready by
  patching ``pods/status`` with the fake server's address as its podIP.
* ``proxy`` fixture: the proxy in a Manager, wired as ``kaiwo-ctrl run`` does
  (its engine scraper reads every 0.2 s); :func:`start_proxy` starts more.

``GET /metrics`` of a :class:`FakeOpenAI` is an engine's metrics endpoint: 404
(an engine without metrics) unless ``engine`` is set, then vLLM's series from
what it holds (running up to ``max_num_seqs``, the rest waiting), or the fixed
``metrics_body``; ``metrics_status``/``metrics_delay`` make it fail or hang.
Metric reads are counted in ``scrapes``, not recorded among ``requests``.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import uuid

import aiohttp
import orjson
import pytest
from aiohttp import web

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.serving.routing.scrape import ScrapeConfig, attach_scraper
from kaiwo_ctrl.serving.proxy.server import setup_proxy
from support import eventually

MERGE = {"Content-Type": "application/merge-patch+json"}
_hosts = itertools.count(11)


def next_host() -> str:
    return f"127.0.0.{next(_hosts) % 200 + 11}"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class FakeOpenAI:
    def __init__(self, name: str, host: str | None = None) -> None:
        self.name, self.host = name, host or next_host()
        self.requests: list[dict] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self.held = 0
        self.fail_next = 0
        self.fail_status = 503
        self.sse_chunks = 3
        self.sse_delay = 0.0
        self.disconnects = 0
        self.break_stream = False
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.engine = False
        self.max_num_seqs = 2
        self.metrics_body: bytes | None = None
        self.metrics_status = 200
        self.metrics_delay = 0.0
        self.scrapes = 0

    async def start(self, port: int = 0) -> FakeOpenAI:
        """Listen on ``host``:``port`` (0: a free port)."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def engine_metrics(self) -> bytes:
        if self.metrics_body is not None:
            return self.metrics_body
        running = min(self.held, self.max_num_seqs)
        return (f'vllm:num_requests_running{{model_name="{self.name}"}} {running}\n'
                f'vllm:num_requests_waiting{{model_name="{self.name}"}} {self.held - running}\n'
                f'vllm:kv_cache_usage_perc{{model_name="{self.name}"}} {0.1 * running}\n').encode()

    async def metrics(self) -> web.Response:
        self.scrapes += 1
        if not self.engine:
            return web.Response(status=404, text="404: Not Found")
        if self.metrics_delay:
            await asyncio.sleep(self.metrics_delay)
        return web.Response(status=self.metrics_status, body=self.engine_metrics(), content_type="text/plain")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/metrics":
            return await self.metrics()
        body = await request.read()
        rec = {"path": request.path_qs, "headers": dict(request.headers), "body": body}
        self.requests.append(rec)
        if self.fail_next > 0:
            self.fail_next -= 1
            return web.json_response({"error": "busy"}, status=self.fail_status)
        try:
            self.held += 1
            await self.hold.wait()
        except asyncio.CancelledError:
            self.disconnects += 1
            raise
        finally:
            self.held -= 1
        parsed = orjson.loads(body) if body[:1] == b"{" else {}
        if parsed.get("stream"):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(self.sse_chunks):
                await resp.write(b"data: " + orjson.dumps({"i": i, "server": self.name}) + b"\n\n")
                if self.break_stream:
                    request.transport.abort()
                    return resp
                if self.sse_delay:
                    await asyncio.sleep(self.sse_delay)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        return web.json_response({"server": self.name, "model": parsed.get("model"), "path": request.path_qs},
                                 headers={"Connection": "keep-alive, X-Secret-Hop", "X-Secret-Hop": "1"})


def model_body(ns: str, name: str, **spec) -> dict:
    base = {"url": "hf://org/model", "engine": "VLLM", "features": ["TextGeneration"], "replicas": 1}
    base.update(spec)
    return {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": name, "namespace": ns}, "spec": base}


def create_model(admin, ns: str, name: str, annotations: dict | None = None, labels: dict | None = None, **spec) -> dict:
    body = model_body(ns, name, **spec)
    if annotations:
        body["metadata"]["annotations"] = annotations
    if labels:
        body["metadata"]["labels"] = labels
    r = admin.post(f"/apis/kubeai.org/v1/namespaces/{ns}/models", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def patch_model(admin, ns: str, name: str, patch: dict) -> None:
    r = admin.patch(f"/apis/kubeai.org/v1/namespaces/{ns}/models/{name}", json=patch, headers=MERGE)
    assert r.status_code == 200, r.text


def get_model(admin, ns: str, name: str) -> dict:
    r = admin.get(f"/apis/kubeai.org/v1/namespaces/{ns}/models/{name}")
    assert r.status_code == 200, r.text
    return r.json()


def server_pod(admin, ns: str, model: str, backend: FakeOpenAI, *, adapters=(), ready=True, name: str | None = None) -> str:
    """A model server Pod standing for ``backend``; Ready with podIP = the backend's address."""
    name = name or f"model-{model}-{uuid.uuid4().hex[:6]}"
    labels = {"app": "model", "model": model, **{f"adapter.kubeai.org/{a}": "h" for a in adapters}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": {"model-pod-port": str(backend.port)}},
           "spec": {"containers": [{"name": "server", "image": "fake"}]}}
    r = admin.post(f"/api/v1/namespaces/{ns}/pods", json=pod)
    assert r.status_code == 201, r.text
    set_pod_ready(admin, ns, name, backend.host, ready)
    return name


def set_pod_ready(admin, ns: str, name: str, ip: str, ready: bool = True) -> None:
    status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
              "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    r = admin.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", json={"status": status}, headers=MERGE)
    assert r.status_code == 200, r.text


def label_pod(admin, ns: str, name: str, labels: dict) -> None:
    r = admin.patch(f"/api/v1/namespaces/{ns}/pods/{name}", json={"metadata": {"labels": labels}}, headers=MERGE)
    assert r.status_code == 200, r.text


@pytest.fixture
async def backends():
    started: list[FakeOpenAI] = []

    async def make(name: str) -> FakeOpenAI:
        b = await FakeOpenAI(name).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.hold.set()
        await b.stop()


class Proxy:
    def __init__(self, mgr: Manager, server, url: str) -> None:
        self.mgr, self.server, self.url = mgr, server, url
        self.scraper = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))

    def endpoints(self, ns: str, model: str) -> list[str]:
        g = self.server.handler.tracker.groups.get((ns, model))
        return sorted(g.endpoints) if g else []

    async def wait_endpoints(self, ns: str, model: str, n: int) -> None:
        await eventually(lambda: len(self.endpoints(ns, model)) == n, what=f"{n} endpoints of {ns}/{model}")

    async def wait_model(self, ns: str, name: str, pred=lambda m: True) -> None:
        inf = self.server.handler.resolver.models
        await eventually(lambda: (m := inf.get(name, ns)) is not None and pred(m), what=f"model {ns}/{name} cached")

    async def post(self, path: str, body: dict | bytes, **kw) -> tuple[int, dict, bytes]:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        headers = kw.pop("headers", {})
        if not isinstance(body, bytes):
            headers.setdefault("Content-Type", "application/json")
        async with self.http.post(self.url + path, data=data, headers=headers, **kw) as r:
            raw = await r.read()
            return r.status, dict(r.headers), raw

    def metric(self, name: str, **labels: str) -> float:
        text = self.mgr.metrics.render().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (line[len(name)] in "{ ") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


async def start_proxy(control_plane, engine_interval: float | None = 0.2, wire=None, **setup) -> Proxy:
    """A proxy replica in its own Manager; ``wire(mgr, server, scraper)`` adds more before it starts.
    ``engine_interval=None``: no engine-metrics scraper (nothing but clients reaches the upstreams);
    ``setup``: more arguments of ``setup_proxy`` (limits, scale_from_zero, auth). Without ``auth`` the proxy is
    the open one (``--proxy-auth none``): these tests are about routing, not callers (test_proxy_auth.py is)."""
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    setup.setdefault("auth", None)
    server = setup_proxy(mgr, "127.0.0.1:0", **setup)
    scraper = None if engine_interval is None else attach_scraper(
        mgr, server.handler.tracker, ScrapeConfig(interval=engine_interval, timeout=0.5))
    if wire is not None:
        wire(mgr, server, scraper)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(server.started.wait(), 60)
    p = Proxy(mgr, server, f"http://127.0.0.1:{server.port}")
    p.scraper, p._stop, p._task = scraper, stop, task
    return p


async def stop_proxy(p: Proxy) -> None:
    await p.http.close()
    p._stop.set()
    await asyncio.wait_for(p._task, 60)


@pytest.fixture
async def proxy(control_plane):
    p = await start_proxy(control_plane)
    yield p
    await stop_proxy(p)
