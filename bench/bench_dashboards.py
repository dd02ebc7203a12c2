#!/usr/bin/env python
"""Benchmark run for the dashboards: a mixed load on the simulated cluster with
kaiwo-ctrl installed by its Helm chart, scraped the way Prometheus would.

* the simulated plane (etcd, kube-apiserver, controller-manager, scheduler,
  kwok, the real Kueue) and ``helm install charts/kaiwo-ctrl`` with
  ``replicas=0``; the operator runs as a local process with the release's
  command, args, env and model config, as the release's ServiceAccount (as in
  e2e/test_helm_install.py), with the GPU resource monitor on;
* a fake GPU exporter (``gpu_gfx_activity`` for each running workload Pod, as
  AMD's device metrics exporter labels it) the resource monitor scrapes;
* two fake vLLM servers on 127.0.0.11 and 127.0.0.12 (OpenAI completions
  with a 40-120 ms service time, and vLLM's ``vllm:`` series). The Model's
  two kwok Pods get those addresses as their Pod IPs, so the operator's proxy
  routes to them;
* load: KaiwoJobs asking for 8 GPUs each (16 in the queue) every 15 s, so some
  wait for quota; requests through the proxy, ramping from 2 to 24 in flight,
  only while every Ready Pod of the Model has an engine's loopback address
  (the Model's replicas are fixed at 2 for that reason);
* every ``--every`` seconds: the operator's /metrics (HTTPS, the ServiceAccount's
  token), Kueue's /metrics, and each fake engine's /metrics with the labels the
  PodMonitor would add (model_namespace, model_name, engine), into a JSONL file.

Then bench/render_dashboards.py draws each dashboard's panels from that file.

    .venv/bin/python bench/bench_dashboards.py [--minutes 5] [--every 5] [--out bench/results/dashboards.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.conftest import OperatorProcess, operator_command, service_account_kubeconfig, wait_for  # noqa: E402
from e2e.simcluster import start_sim_plane  # noqa: E402
from kaiwo_ctrl.local.controlplane import free_port  # noqa: E402

NS = "kaiwo-samples"
MODEL = "llama-8b"
ENGINES = ("127.0.0.11", "127.0.0.12")
ENGINE_PORT = 8000  # the operator's model server port (serving/model/engines.py PORT)


# ----------------------------------------------------------------------------- fake servers


class FakeVLLM:
    """OpenAI completions after a drawn service time, and a few of vLLM's series."""

    BUCKETS = (0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 1.0)

    def __init__(self) -> None:
        self.running = 0
        self.waiting = 0
        self.ttft = [0] * (len(self.BUCKETS) + 1)
        self.ttft_sum = 0.0

    async def complete(self, request: web.Request) -> web.Response:
        await request.read()
        self.waiting += 1
        await asyncio.sleep(random.uniform(0.0, 0.02) * self.running / 4)  # queueing grows with load
        self.waiting -= 1
        self.running += 1
        t = random.uniform(0.04, 0.12) * (1 + self.running / 16)
        await asyncio.sleep(t)
        self.running -= 1
        i = next((n for n, b in enumerate(self.BUCKETS) if t <= b), len(self.BUCKETS))
        self.ttft[i] += 1
        self.ttft_sum += t
        return web.json_response({"id": "cmpl", "object": "text_completion", "choices": [{"text": "ok", "index": 0}]})

    async def metrics(self, request: web.Request) -> web.Response:
        lines = [f"vllm:num_requests_running {self.running}", f"vllm:num_requests_waiting {self.waiting}"]
        acc = 0
        for b, n in zip((*map(str, self.BUCKETS), "+Inf"), self.ttft):
            acc += n
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{b}"}} {acc}')
        lines += [f"vllm:time_to_first_token_seconds_count {acc}", f"vllm:time_to_first_token_seconds_sum {self.ttft_sum}"]
        return web.Response(text="\n".join(lines) + "\n")


def gpu_exporter(admin: httpx.Client, port: int) -> web.Application:
    """gpu_gfx_activity for each running Pod of a Kaiwo workload (8 GPUs a Pod)."""
    async def metrics(request: web.Request) -> web.Response:
        pods = admin.get(f"/api/v1/namespaces/{NS}/pods").json()["items"]
        lines = []
        for p in pods:
            if p["status"].get("phase") != "Running" or "kaiwo.silogen.ai/run-id" not in p["metadata"].get("labels", {}):
                continue
            seed = sum(map(ord, p["metadata"]["name"]))
            for gpu in range(8):
                v = max(0.0, min(100.0, 20 + (seed % 60) + random.uniform(-8, 8) - gpu))
                lines.append(f'gpu_gfx_activity{{namespace="{NS}",pod="{p["metadata"]["name"]}",container="main",'
                             f'gpu_id="{gpu}",gpu_partition_id="0"}} {v:.1f}')
        return web.Response(text="\n".join(lines) + "\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


def serve_in_thread(apps: list[tuple[web.Application, str, int]]) -> None:
    loop = asyncio.new_event_loop()

    async def start() -> None:
        for app, host, port in apps:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, host, port).start()

    loop.run_until_complete(start())
    threading.Thread(target=loop.run_forever, daemon=True).start()


# ----------------------------------------------------------------------------- the scenario


def helm(plane, *args: str) -> str:
    binary = subprocess.run([str(REPO / "hack" / "envtest" / "build-helm.sh")], capture_output=True, text=True, check=True).stdout.split()[-1]
    out = subprocess.run([binary, "--kubeconfig", str(plane.kubeconfig), *args], capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"helm {args[0]}: {out.stderr}")
    return out.stdout


def kubectl(plane, *args: str) -> None:
    exe = Path(sys.executable).parent / "kubectl"
    subprocess.run([str(exe), "--kubeconfig", str(plane.kubeconfig), *args], check=True, capture_output=True)


def start_operator(plane, admin, work: Path, gpu_port: int):
    helm(plane, "install", "kaiwo", str(REPO / "charts" / "kaiwo-ctrl"), "-n", "kaiwo-system", "--create-namespace",
         "--set", "replicas=0")
    docs = [d for d in yaml.safe_load_all(helm(plane, "get", "manifest", "kaiwo", "-n", "kaiwo-system")) if d]
    dep = next(d for d in docs if d["kind"] == "Deployment")
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kaiwo-model-config")
    (work / "model-config.yaml").write_text(config["data"]["config.yaml"])
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]
    kubeconfig = service_account_kubeconfig(plane, admin, sa["namespace"], sa["name"], work / "kubeconfig")
    health, metrics = free_port(), free_port()
    argv, env = operator_command({"deployment": dep, "container": dep["spec"]["template"]["spec"]["containers"][0]},
                                 kubeconfig, health, metrics)
    argv = [f"--model-config={work / 'model-config.yaml'}" if a.startswith("--model-config=") else a for a in argv]
    # the load is about the dashboards, not callers: the open proxy (--proxy-auth none; bench/RESULTS.md says so)
    argv = [a for a in argv if not a.startswith("--proxy-auth=")] + ["--proxy-auth=none"]
    env |= {"RESOURCE_MONITORING_ENABLED": "true", "RESOURCE_MONITORING_POLLING_INTERVAL": "10s",
            "RESOURCE_MONITORING_METRICS_ENDPOINT": f"http://127.0.0.1:{gpu_port}/metrics"}
    proc = OperatorProcess(argv, env, work / "operator.log", health, metrics)
    wait_for(lambda: httpx.get(f"http://127.0.0.1:{health}/readyz", timeout=2).status_code == 200, 120, "operator /readyz")
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "bench-metrics"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kaiwo-metrics-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]}
    admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json=binding)
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    proxy = next(a.split(":")[-1] for a in argv if a.startswith("--proxy-bind-address="))
    return proc, token, int(proxy)


def model(replicas: int = 2) -> dict:
    return {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": MODEL, "namespace": NS},
            # minReplicas = maxReplicas: a Pod the autoscaler added would be Ready with kwok's (non-loopback)
            # Pod IP before it could be pointed at an engine, and the proxy would send requests there
            "spec": {"features": ["TextGeneration"], "engine": "VLLM", "url": "hf://org/llama-8b", "resourceProfile": "cpu:1",
                     "minReplicas": replicas, "maxReplicas": replicas, "targetRequests": 6}}


def model_pods(admin: httpx.Client) -> list[dict]:
    """The Model's Ready Pods."""
    pods = admin.get(f"/api/v1/namespaces/{NS}/pods", params={"labelSelector": f"model={MODEL}"}).json()["items"]
    return [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


def point_model_pods_at_engines(admin: httpx.Client) -> int:
    """Give the Model's Ready kwok Pods the fake engines' loopback addresses as Pod IPs
    (kwok leaves a patched IP alone); returns how many Ready Pods have one."""
    pods = sorted(model_pods(admin), key=lambda p: p["metadata"]["name"])
    for pod, ip in zip(pods, ENGINES):
        if pod["status"].get("podIP") != ip:
            patch = {"status": {"podIP": ip, "podIPs": [{"ip": ip}]}}  # a merge patch replaces the list
            r = admin.patch(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}/status", json=patch,
                            headers={"Content-Type": "application/merge-patch+json"})
            r.raise_for_status()
    return sum(p["status"].get("podIP") in ENGINES for p in model_pods(admin))


def only_loopback_endpoints(admin: httpx.Client) -> bool:
    """Load goes to loopback only: every Ready Pod of the Model (the proxy's endpoints) is an engine."""
    return all(p["status"].get("podIP") in ENGINES for p in model_pods(admin))


def job(i: int) -> dict:
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": f"train-{i}", "namespace": NS},
            "spec": {"user": "bench@example.com", "image": "busybox:1.36", "gpus": 8, "entrypoint": "sleep 30"}}


class Scraper:
    def __init__(self, out: Path, targets: list[tuple[str, dict, dict]]) -> None:
        self.out, self.targets = out, targets  # (url, headers, extra labels)

    def once(self, t: float) -> None:
        with self.out.open("a") as f:
            for url, headers, labels in self.targets:
                try:
                    r = httpx.get(url, headers=headers, verify=False, timeout=5)
                except httpx.HTTPError as e:
                    print(f"scrape {url}: {e!r}", file=sys.stderr)
                    continue
                if r.status_code == 200:
                    f.write(json.dumps({"t": t, "labels": labels, "text": r.text}) + "\n")


async def drive_proxy(port: int, seconds: float, stop: threading.Event) -> None:
    """Closed-loop clients through the proxy, 2 ramping up to 24 and back down."""
    url = f"http://127.0.0.1:{port}/openai/v1/completions"
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
    t0 = time.monotonic()

    async def client(n: int, c: httpx.AsyncClient) -> None:
        while not stop.is_set():
            phase = (time.monotonic() - t0) / seconds
            if n >= 2 + 22 * (1 - abs(2 * phase - 1)):
                await asyncio.sleep(0.2)
                continue
            try:
                await c.post(url, json=body, timeout=30)
            except httpx.HTTPError:
                await asyncio.sleep(0.2)

    async with httpx.AsyncClient() as c:
        await asyncio.gather(*(client(n, c) for n in range(24)))


def run(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-dashboards-"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("")
    plane = start_sim_plane(work / "plane", run_ms=30000)
    try:
        with httpx.Client(base_url=plane.url, verify=plane.admin_ssl_context(), timeout=30) as admin:
            scenario(args, plane, admin, work)
    finally:
        plane.stop()


def scenario(args: argparse.Namespace, plane, admin: httpx.Client, work: Path) -> None:
    gpu_port = free_port()
    engines = [FakeVLLM() for _ in ENGINES]
    apps = [(gpu_exporter(admin, gpu_port), "127.0.0.1", gpu_port)]
    for e, host in zip(engines, ENGINES):
        app = web.Application()
        app.router.add_post("/v1/completions", e.complete)
        app.router.add_get("/metrics", e.metrics)
        apps.append((app, host, ENGINE_PORT))
    serve_in_thread(apps)
    kubectl(plane, "apply", "-f", str(REPO / "config" / "samples" / "nodes_kwok.yaml"))
    proc, token, proxy_port = start_operator(plane, admin, work, gpu_port)
    try:
        kubectl(plane, "apply", "-f", str(REPO / "config" / "samples" / "namespace.yaml"))
        kubectl(plane, "apply", "-f", str(REPO / "config" / "samples" / "kaiwo_v1alpha1_kaiwoqueueconfig.yaml"))
        wait_for(lambda: admin.get("/apis/kueue.x-k8s.io/v1beta2/clusterqueues/kaiwo").status_code == 200, 90, "ClusterQueue")
        admin.post(f"/apis/kubeai.org/v1/namespaces/{NS}/models", json=model())
        wait_for(lambda: point_model_pods_at_engines(admin) == 2 and only_loopback_endpoints(admin), 120,
                 "two Ready Model Pods on the engines' loopback addresses")
        kueue_cfg = yaml.safe_load((work / "plane" / "kueue" / "config.yaml").read_text())
        auth = {"Authorization": f"Bearer {token}"}
        # the target labels Prometheus would add (pod), so per-replica panels have a legend
        targets = [(f"https://127.0.0.1:{proc.metrics_port}/metrics", auth, {"pod": "kaiwo-controller-manager-0"}),
                   (f"https://{kueue_cfg['metrics']['bindAddress']}/metrics", auth, {"pod": "kueue-controller-manager-0"})]
        targets += [(f"http://{ip}:{ENGINE_PORT}/metrics", {}, {"model_namespace": NS, "model_name": MODEL, "engine": "vllm"})
                    for ip in ENGINES]
        scraper = Scraper(args.out, targets)
        stop = threading.Event()
        seconds = args.minutes * 60
        loader = threading.Thread(target=lambda: asyncio.run(drive_proxy(proxy_port, seconds, stop)), daemon=True)
        loader.start()
        t0 = time.monotonic()
        submitted = 0
        while (now := time.monotonic() - t0) < seconds:
            if now >= submitted * 15 and submitted < seconds // 15 - 2:
                admin.post(f"/apis/kaiwo.silogen.ai/v1alpha1/namespaces/{NS}/kaiwojobs", json=job(submitted))
                submitted += 1
            if not only_loopback_endpoints(admin):  # never send load off loopback
                stop.set()
                raise SystemExit("a Ready Model Pod has a non-loopback IP: load stopped")
            scraper.once(time.time())
            time.sleep(args.every)
        stop.set()
        print(f"scraped {args.out} for {args.minutes} min; {submitted} KaiwoJobs; operator log {proc.log}")
    finally:
        proc.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5)
    p.add_argument("--every", type=float, default=5)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "dashboards.jsonl")
    args = p.parse_args()
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
