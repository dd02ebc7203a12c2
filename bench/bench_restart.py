#!/usr/bin/env python
"""Benchmark: restarting the operator with N KaiwoJobs and their N Jobs present.

Starts its own control plane, creates N KaiwoJobs (default 10000), then runs
``kaiwo-ctrl run`` as a separate process (the "creating run") until every
KaiwoJob has its Job and the queue is empty, and records that process's peak
RSS. It stops it and starts it again (the restart) and prints:

* time to ready: process start until ``/readyz`` answers 200 (caches synced);
* time to the end of the first pass: every KaiwoJob reconciled once and the
  workqueue empty;
* RSS at both points (and the creating run's peak, the target to stay under);
* CPU seconds of the operator process up to ready and over the first pass;
* writes (POST/PUT/PATCH/DELETE, lease renewals excluded) in the first pass: 0
  is expected, since nothing changed;
* the API server's floor: how long it takes to send the lists of all
  KaiwoJobs and all Jobs (the two big ones the operator syncs) to a reader
  that only reads them, and the server's CPU seconds for that: no operator
  can be ready sooner than its start-up plus this.

Figures come from /proc and from the operator's own /metrics; the load
average is printed with each restart, since the machine may be shared. The
operator's modules are byte-compiled first (``compileall``, into the
git-ignored ``__pycache__``), as ``pip install`` does in the image: with
``PYTHONDONTWRITEBYTECODE`` set, as here, every start would otherwise compile
~140 modules from source (~0.15 s of CPU). Not a test:

    .venv/bin/python bench/bench_restart.py [--count 10000] [--workers 16]

``--kubeconfig`` restarts against a control plane that already holds the
KaiwoJobs and Jobs (in namespace ``bench-restart``), skipping the set-up and
the creating run; ``--peak`` then gives the creating run's peak to compare.

``--go-operator BIN`` times the Go Kaiwo operator's manager binary (built from
github.com/silogen/kaiwo, ``go build ./cmd/operator``) after each restart, on
the same plane: process start until its last controller logs "Starting
workers", which controller-runtime does once that controller's caches have
synced. It runs with a read-only ServiceAccount token, so its refused writes
leave the objects as the next restart of ours expects them.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import procstat  # noqa: E402
from bench_kaiwojobs import arrange  # noqa: E402
from kaiwo_ctrl.runtime.process import loop  # noqa: E402
from kaiwo_ctrl.local.controlplane import ControlPlane, free_port, locate_assets  # noqa: E402
from kaiwo_ctrl.runtime.api.client import ApiError, Client  # noqa: E402
from kaiwo_ctrl.runtime.api.restconfig import RestConfig  # noqa: E402

NS = "bench-restart"
CONTROLLER = "kaiwojob"
WRITES = ("POST", "PUT", "PATCH", "DELETE")


class Operator:
    def __init__(self, kubeconfig: str, workers: int, log: Path) -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        # one keep-alive client for every probe and scrape: a new httpx client
        # per request costs ~18 ms of CPU (its TLS context), which polling every
        # 10 ms would take from the operator and the API server on 2 cores
        self.http = httpx.Client(timeout=5)
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kaiwo_ctrl", "run", f"--kubeconfig={kubeconfig}", f"--workers={workers}",
             f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
             f"--health-probe-bind-address=127.0.0.1:{self.health_port}", "--proxy-gateway-bind-address=127.0.0.1:0",
             "--log-level=warning"],
            stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=REPO,  # noqa: SIM115
        )

    def rss_mib(self) -> float:
        return procstat.rss_mib(self.proc.pid)

    def peak_mib(self) -> float:
        return procstat.peak_rss_mib(self.proc.pid)

    def cpu(self) -> float:
        return procstat.cpu_seconds(self.proc.pid)

    def ready(self) -> bool:
        try:
            return self.http.get(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def metric(self, name: str, *must: str) -> float:
        try:
            text = self.http.get(f"http://127.0.0.1:{self.metrics_port}/metrics").text
        except httpx.HTTPError:
            return -1.0
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") and all(m in line for m in must))

    def writes(self) -> float:
        return sum(self.metric("rest_client_resource_requests_total", f'method="{m}"') for m in WRITES) \
            - sum(self.metric("rest_client_resource_requests_total", f'method="{m}"', 'resource="leases"') for m in WRITES)

    def reconciles(self) -> float:
        return self.metric("controller_runtime_reconcile_total", f'controller="{CONTROLLER}"')

    def idle(self) -> bool:
        return self.metric("workqueue_depth", f'name="{CONTROLLER}"') == 0 and \
            self.metric("controller_runtime_active_workers", f'controller="{CONTROLLER}"') == 0

    def stop(self) -> None:
        self.http.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def wait(cond, timeout: float, what: str, interval: float = 0.01) -> float:
    deadline = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > deadline:
            raise TimeoutError(what)
        time.sleep(interval)
    return time.perf_counter()


def count_jobs(h: httpx.Client) -> int:
    meta = h.get(f"/apis/batch/v1/namespaces/{NS}/jobs", params={"limit": 1}).json()
    return len(meta.get("items") or []) + int(meta["metadata"].get("remainingItemCount") or 0)


def busy_share(interval: float = 1.0) -> float:
    """The share of all CPUs' time spent busy over ``interval`` (from /proc/stat)."""
    def snap() -> tuple[int, int]:
        vals = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(vals), vals[3] + vals[4]  # all, idle + iowait

    t0, i0 = snap()
    time.sleep(interval)
    t1, i1 = snap()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(limit: float = 60.0, threshold: float = 0.1) -> float:
    """Until the machine is idle (what the creating run or the last restart
    set going, e.g. the API server's compaction, has finished), at most
    ``limit`` seconds; returns the busy share measured last."""
    end = time.monotonic() + limit
    while True:
        busy = busy_share()
        if busy < threshold or time.monotonic() > end:
            return busy


def restarts(kc: str, args: argparse.Namespace, logs: Path, peak: float) -> None:
    cfg = loop.run(RestConfig.load(kc))
    readies: list[tuple[float, int]] = []  # (seconds, the API server's garbage collections meanwhile)
    go_readies: list[tuple[float, int]] = []
    go_kc = read_only_kubeconfig(kc, logs) if args.go_operator else None
    for i in range(args.restarts):
        busy = wait_quiet()
        load = os.getloadavg()[0]
        gcs = server_gcs(cfg)
        op = Operator(kc, args.workers, logs / f"restart-{i}.log")
        ready_at = wait(op.ready, 300, "ready")
        ready, rss_ready, cpu_ready = ready_at - op.t0, op.rss_mib(), op.cpu()
        gcs = server_gcs(cfg) - gcs
        readies.append((ready, gcs))
        w0 = op.writes()
        done_at = wait(lambda: op.reconciles() >= args.count and op.idle(), 600, "first pass", interval=0.05)
        rss_pass, cpu_pass, writes = op.rss_mib(), op.cpu() - cpu_ready, op.writes() - w0
        peak_restart = op.peak_mib()
        op.stop()
        print(f"restart {i + 1} (load {load:.1f}, CPUs {busy:.0%} busy just before): ready in {ready:.2f} s (CPU {cpu_ready:.2f} s, RSS {rss_ready:.0f} MiB, "
              f"API server GCs meanwhile {gcs}); "
              f"first pass done {done_at - op.t0:.2f} s after start ({done_at - ready_at:.2f} s after ready, "
              f"CPU {cpu_pass:.2f} s, RSS {rss_pass:.0f} MiB, peak {peak_restart:.0f} MiB); "
              f"writes in the first pass: {writes:.0f}", flush=True)
        if go_kc:
            go_readies.append(time_go_operator(args.go_operator, go_kc, logs / f"go-{i}.log", cfg))
    summarize("ready", readies)
    if go_readies:
        summarize("Go operator, workers started", go_readies)
    print(f"target: ready <= 1.5 s; RSS after restart <= creating run's peak ({peak:.0f} MiB)")


GO_CONTROLLERS = {"kaiwojob", "kaiwoservice", "kaiwoqueueconfig"}


def read_only_kubeconfig(kc: str, d: Path) -> str:
    """A kubeconfig for a ServiceAccount that may get, list and watch anything
    and write nothing (for the Go operator, see the module docstring)."""
    import yaml

    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bench-go-readonly", "namespace": "default"}}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "bench-go-readonly"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "bench-go-readonly"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-go-readonly"},
               "subjects": [{"kind": "ServiceAccount", "name": "bench-go-readonly", "namespace": "default"}]}

    async def token() -> str:
        async with await Client.from_kubeconfig(kc) as c:
            for path, obj in (("/api/v1/namespaces/default/serviceaccounts", sa),
                              ("/apis/rbac.authorization.k8s.io/v1/clusterroles", role),
                              ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)):
                try:
                    await c.request("POST", path, body=obj)
                except ApiError as e:
                    if e.status != 409:
                        raise
            answer = await c.request("POST", "/api/v1/namespaces/default/serviceaccounts/bench-go-readonly/token",
                                     body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                           "spec": {"expirationSeconds": 86400}})
            return answer["status"]["token"]

    cfg = yaml.safe_load(Path(kc).read_text())
    cfg["users"] = [{"name": "bench-go-readonly", "user": {"token": loop.run(token())}}]
    for ctx in cfg["contexts"]:
        ctx["context"]["user"] = "bench-go-readonly"
    out = d / "go-readonly.kubeconfig"
    out.write_text(yaml.safe_dump(cfg))
    return str(out)


def summarize(what: str, runs: list[tuple[float, int]]) -> None:
    """Median and count within the target, overall and split by whether the
    API server collected its heap during the start: on 2 shared cores a
    collection of its heap (about 1 GiB with these objects) takes CPU from the
    lists and from the operator alike."""
    def line(label: str, xs: list[float]) -> str:
        return f"{label} {len(xs)}: median {statistics.median(xs):.2f} s, {sum(x <= 1.5 for x in xs)} within 1.5 s, max {max(xs):.2f} s" if xs else f"{label} 0"

    print(f"{what}: " + "; ".join((line("all", [r for r, _ in runs]),
                                   line("without an API server GC meanwhile", [r for r, g in runs if g == 0]),
                                   line("with one", [r for r, g in runs if g > 0]))))


def time_go_operator(binary: str, kc: str, log: Path, cfg: RestConfig) -> tuple[float, int]:
    """Start the Go operator and wait until every controller logged "Starting
    workers"; returns the seconds since its start and the API server's
    garbage collections meanwhile, and stops it."""
    wait_quiet()
    gcs = server_gcs(cfg)
    t0 = time.perf_counter()
    proc = subprocess.Popen([binary, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0"],
                            env={**os.environ, "KUBECONFIG": kc}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started: set[str] = set()
    assert proc.stdout is not None
    with open(log, "wb") as out:
        for line in proc.stdout:
            out.write(line)
            if b'"Starting workers"' in line:
                started |= {c for c in GO_CONTROLLERS if f'"controller":"{c}"'.encode() in line}
                if started == GO_CONTROLLERS:
                    break
    took, cpu = time.perf_counter() - t0, procstat.cpu_seconds(proc.pid)
    proc.kill()
    proc.wait()
    if started != GO_CONTROLLERS:
        raise RuntimeError(f"the Go operator exited before starting {sorted(GO_CONTROLLERS - started)}; see {log}")
    gcs = server_gcs(cfg) - gcs
    print(f"  Go operator: workers started after {took:.2f} s (CPU {cpu:.2f} s, API server GCs meanwhile {gcs})", flush=True)
    return took, gcs


def api_get(cfg: RestConfig, path: str) -> Iterator[bytes]:
    """GET ``path`` with the kubeconfig's credentials; the body as it arrives."""
    host, _, port = cfg.host.split("//", 1)[1].rpartition(":")
    ctx = cfg.ssl_context()
    assert isinstance(ctx, ssl.SSLContext), "an https API server"
    conn = http.client.HTTPSConnection(host.strip("[]"), int(port), context=ctx, timeout=120)
    try:
        conn.request("GET", path, headers={"Accept": "application/json", **({"Authorization": f"Bearer {cfg.token}"} if cfg.token else {})})
        resp = conn.getresponse()
        assert resp.status == 200, (path, resp.status)
        while data := resp.read(1 << 20):
            yield data
    finally:
        conn.close()


def read_list(cfg: RestConfig, path: str, out: dict[str, int]) -> None:
    """Read one list (as the informers do: one GET, not paged) as raw bytes;
    nothing is decoded."""
    out[path] = sum(len(chunk) for chunk in api_get(cfg, path))


def server_gcs(cfg: RestConfig) -> int:
    """How many garbage collections the API server (a Go process) has run."""
    for line in b"".join(api_get(cfg, "/metrics")).splitlines():
        if line.startswith(b"go_gc_duration_seconds_count"):
            return int(float(line.split()[1]))
    return -1


def server_floor(kc: str, apiserver_pid: int | None) -> None:
    """The API server's floor (see the module docstring), three times."""
    cfg = loop.run(RestConfig.load(kc))
    if cfg.token_hook is not None or not cfg.host.startswith("https"):
        print("API server floor: skipped (needs an https server and a client certificate or static token)")
        return
    paths = ["/apis/kaiwo.silogen.ai/v1alpha1/kaiwojobs", "/apis/batch/v1/jobs"]
    for i in range(3):
        wait_quiet()
        out: dict[str, int] = {}
        cpu0 = procstat.cpu_seconds(apiserver_pid) if apiserver_pid else 0.0
        t0 = time.perf_counter()
        threads = [threading.Thread(target=read_list, args=(cfg, p, out)) for p in paths]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - t0
        cpu = f", API server CPU {procstat.cpu_seconds(apiserver_pid) - cpu0:.2f} s" if apiserver_pid else ""
        print(f"API server floor {i + 1}: both lists ({sum(out.values()) / 2**20:.0f} MiB) read raw in "
              f"{took:.2f} s{cpu}", flush=True)


def compile_bytecode() -> None:
    """Byte-compile kaiwo_ctrl and api as the image's ``pip install`` does."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "kaiwo_ctrl", "api"], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--restarts", type=int, default=2)
    p.add_argument("--kubeconfig", help="an existing control plane holding --count KaiwoJobs and their Jobs")
    p.add_argument("--peak", type=float, default=0.0, help="with --kubeconfig: the creating run's peak RSS, MiB")
    p.add_argument("--apiserver-pid", type=int, help="with --kubeconfig: the API server's pid, for its CPU seconds")
    p.add_argument("--go-operator", metavar="BIN", help="also time the Go Kaiwo operator's binary (see above)")
    args = p.parse_args()
    compile_bytecode()
    if args.kubeconfig:
        with tempfile.TemporaryDirectory(prefix="bench-restart-") as d:
            restarts(args.kubeconfig, args, Path(d), args.peak)
        server_floor(args.kubeconfig, args.apiserver_pid)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as d:
        plane = ControlPlane(directory=Path(d), assets=locate_assets(build=True))
        plane.start(install_crds=True)
        kc = str(plane.kubeconfig)
        try:
            async def setup() -> None:
                client = await Client.from_kubeconfig(kc)
                await arrange(client, [NS], args.count)
                await client.close()

            t = time.perf_counter()
            loop.run(setup())
            print(f"created {args.count} KaiwoJobs in {time.perf_counter() - t:.1f} s")
            with httpx.Client(base_url=plane.url, verify=plane.admin_ssl_context(), timeout=30) as h:
                op = Operator(kc, args.workers, Path(d) / "create.log")
                wait(lambda: count_jobs(h) >= args.count, 1800, "all Jobs created", interval=1.0)
                wait(op.idle, 600, "creating run idle", interval=0.5)
                created_in, peak = time.perf_counter() - op.t0, op.peak_mib()
                op.stop()
                print(f"creating run: {args.count} Jobs in {created_in:.1f} s; peak RSS {peak:.0f} MiB")
                restarts(kc, args, Path(d), peak)
            server_floor(kc, plane.processes["kube-apiserver"].pid)
        finally:
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
