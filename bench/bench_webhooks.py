#!/usr/bin/env python
"""Benchmark: the admission latency each kaiwo-ctrl webhook adds, on a real apiserver.

Starts its own control plane, runs ``kaiwo-ctrl run --webhook-bind-address
127.0.0.1:P --webhook-url-host 127.0.0.1`` (webhooks registered with a URL,
called for real by the apiserver over TLS) and times, from the client, N
sequential requests per webhook:

* ``mutate-jobs``: create a labelled Job (the Job is adopted: finalizer,
  labels, LocalQueue, tracking KaiwoJob created after the response);
* ``validate-jobs``: delete such a Job (finalizer released, KaiwoJob deleted);
* ``validate-<kind>``: a dry-run create (the queue config: a dry-run patch)
  of a valid object of each of our kinds.

Then it stops the operator, deletes the webhook configurations and times
the very same requests again. The difference of the percentiles is the
latency the webhook adds. Not a test; run it by hand:

    .venv/bin/python bench/bench_webhooks.py [--requests 200] [--pause 0.1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "test"))

from kaiwo_ctrl.local.controlplane import ControlPlane, free_port, locate_assets  # noqa: E402
from support.operator import OperatorProcess  # noqa: E402

KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
NS = "bench"
DRY = {"dryRun": "All"}
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kaiwo-mutating-webhook-configuration"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kaiwo-validating-webhook-configuration"
WORKLOAD = {"user": "bench@example.com", "image": "busybox", "entrypoint": "sleep 1", "gpus": 1, "replicas": 1,
            "gpusPerReplica": 1, "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}


def job(name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {"kaiwo.silogen.ai/managed": "true"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}


def check(r: httpx.Response, *ok: int) -> None:
    if r.status_code not in ok:
        raise SystemExit(f"unexpected {r.status_code}: {r.text[:300]}")


def scenarios(h: httpx.Client, n: int, tag: str, pause: float = 0.0) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}

    def timed(name: str, fn) -> None:
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            fn(i)
            samples.append(time.perf_counter() - t0)
            time.sleep(pause)  # think time: the operator's follow-up work (reconciles) settles in between
        out[name] = samples

    jobs = f"/apis/batch/v1/namespaces/{NS}/jobs"
    timed("mutate-jobs (create labelled Job)", lambda i: check(h.post(jobs, json=job(f"{tag}-{i}")), 201))
    body = {"propagationPolicy": "Background"}
    timed("validate-jobs (delete it)", lambda i: check(h.request("DELETE", f"{jobs}/{tag}-{i}", json=body), 200))
    for kind, plural in (("KaiwoJob", "kaiwojobs"), ("KaiwoService", "kaiwoservices")):
        doc = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": kind, "metadata": {"name": "w"}, "spec": WORKLOAD}
        timed(f"validate-{kind.lower()} (dry-run create)",
              lambda i, d=doc, p=plural: check(h.post(f"{KAIWO}/namespaces/{NS}/{p}", json=d, params=DRY), 201))
    qc = {"spec": {"resourceFlavors": [{"name": "f"}], "clusterQueues": [{"name": "kaiwo", "spec": {"resourceGroups": [
        {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "8"}]}]}]}}]}}
    timed("validate-kaiwoqueueconfig (dry-run patch)",
          lambda i: check(h.patch(f"{KAIWO}/kaiwoqueueconfigs/kaiwo", json=qc, params=DRY,
                                  headers={"Content-Type": "application/merge-patch+json"}), 200))
    aim = {"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "AIMNamespaceConfig", "metadata": {"name": "a"},
           "spec": {"credentials": {"huggingFaceToken": {"secretName": "hf", "secretKey": "token"}}}}
    timed("validate-aimnamespaceconfig (dry-run create)", lambda i: check(
        h.post(f"/apis/config.kaiwo.silogen.ai/v1alpha1/namespaces/{NS}/aimnamespaceconfigs", json=aim, params=DRY), 201))
    model = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "m"},
             "spec": {"url": "hf://org/model", "engine": "VLLM", "features": ["TextGeneration"], "resourceProfile": "cpu:1"}}
    timed("validate-model (dry-run create)",
          lambda i: check(h.post(f"/apis/kubeai.org/v1/namespaces/{NS}/models", json=model, params=DRY), 201))
    return out


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] * 1000


def wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--pause", type=float, default=0.1,
                   help="seconds between requests (0: back to back, which also measures the operator's backlog)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-webhooks-") as tmp:
        plane = ControlPlane(Path(tmp) / "plane", locate_assets(build=True)).start(install_crds=True)
        op = None
        try:
            with httpx.Client(base_url=plane.url, verify=plane.admin_ssl_context(), timeout=30) as h:
                for ns in ("kaiwo-system", NS):
                    check(h.post("/api/v1/namespaces", json={"metadata": {"name": ns}}), 201)
                port = free_port()
                op = OperatorProcess(str(plane.kubeconfig), Path(tmp) / "operator.log",
                                     f"--webhook-bind-address=127.0.0.1:{port}", "--webhook-url-host=127.0.0.1")

                def serving() -> bool:
                    r = h.get(VALIDATING)
                    return r.status_code == 200 and all(w["clientConfig"].get("caBundle") for w in r.json()["webhooks"]) \
                        and h.get(f"{KAIWO}/kaiwoqueueconfigs/kaiwo").status_code == 200

                wait(serving, 120, "webhooks registered")
                scenarios(h, 10, "warm")  # connections, caches
                with_hooks = scenarios(h, args.requests, "on", args.pause)
                server = op.metrics()
                op.stop()
                op = None
                for url in (MUTATING, VALIDATING):
                    check(h.delete(url), 200)
                scenarios(h, 10, "warm2")
                without = scenarios(h, args.requests, "off", args.pause)
        finally:
            if op is not None:
                op.stop()
            plane.stop()
    print(f"\nadded admission latency, {args.requests} sequential requests each, {args.pause}s apart"
          " (ms; with webhook - without)")
    print(f"{'webhook':48} {'p50 on':>7} {'p50 off':>8} {'+p50':>6} {'p99 on':>7} {'p99 off':>8} {'+p99':>6}")
    for name, on in with_hooks.items():
        off = without[name]
        p50a, p50b, p99a, p99b = pct(on, 0.5), pct(off, 0.5), pct(on, 0.99), pct(off, 0.99)
        print(f"{name:48} {p50a:7.2f} {p50b:8.2f} {p50a - p50b:6.2f} {p99a:7.2f} {p99b:8.2f} {p99a - p99b:6.2f}")
    print("\nserver-side handler time (controller_runtime_webhook_latency_seconds):")
    sums: dict[str, list[float]] = {}
    for line in server.splitlines():
        for suffix in ("_sum{", "_count{"):
            if line.startswith("controller_runtime_webhook_latency_seconds" + suffix):
                hook = line.split('webhook="', 1)[1].split('"', 1)[0]
                sums.setdefault(hook, [0.0, 0.0])[0 if suffix == "_sum{" else 1] += float(line.rsplit(" ", 1)[1])
    for hook, (total, count) in sorted(sums.items()):
        if count:
            print(f"  {hook:58} mean {total / count * 1000:6.2f} ms over {int(count)} requests")
    print(f"\n(medians of the raw samples: on {statistics.median(sum(with_hooks.values(), [])) * 1000:.2f} ms, "
          f"off {statistics.median(sum(without.values(), [])) * 1000:.2f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
