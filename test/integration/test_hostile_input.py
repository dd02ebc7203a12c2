"""Hostile but schema-valid input on the real apiserver (acceptance test of issue 9).

A seeded RNG (``KAIWO_HOSTILE_SEED``, printed on failure) picks KaiwoJobs and
KaiwoServices from a catalogue of hostile shapes: wrong-typed embedded specs,
credentials in URLs, secret files outside the secrets mount, overflowing
durations and quantities, long and odd names, long queue and vendor strings.
It also edits the KaiwoQueueConfig with an overflowing quota. Then:

* the apiserver refuses what the CRD schema can express (named per case);
* every accepted object gets a status, and where it failed, ERROR/FAILED with
  a non-empty condition message no longer than the bound;
* the operator stays healthy and no object's resourceVersion keeps changing
  once settled;
* a valid KaiwoJob created afterwards still converges.

The operator runs in-process on its own control plane (the test edits the
cluster-wide KaiwoQueueConfig), wired as ``kaiwo-ctrl run`` wires it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import uuid
import dataclasses
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from kaiwo_ctrl.kinds import KAIWOJOBS
from kaiwo_ctrl.runtime.observe.conditions import MESSAGE_LIMIT
from kaiwo_ctrl.runtime.api.deepjson import undecodable
from kaiwo_ctrl.runtime.objects.names import is_dns1123_label
from support import eventually
from support.planes import own_plane

SEED = int(os.environ.get("KAIWO_HOSTILE_SEED", "9"))
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
QC_URL = f"{KAIWO}/kaiwoqueueconfigs"
PLURAL = {"KaiwoJob": "kaiwojobs", "KaiwoService": "kaiwoservices"}
FAILED_STATES = ("ERROR", "FAILED")


@dataclass
class Case:
    """One hostile object and what must come of it."""

    label: str
    kind: str
    name: str
    spec: dict[str, Any]
    #: "refused" (by the apiserver), "failed" (ERROR/FAILED naming ``field``) or "runs" (any other status)
    expect: str
    field: str = ""
    #: True when the status depends on the reconciler turning any build error into
    #: an ERROR status (issue 10's catch-all) rather than on a check of its own
    needs_catch_all: bool = False
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def _name(rng: random.Random, length: int | None = None) -> str:
    length = length or rng.randint(3, 20)
    head = rng.choice("abcdefghijklmnopqrstuvwxyz")
    body = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789-") for _ in range(max(length - 2, 0)))
    return (head + body + rng.choice("abcdefghijklmnopqrstuvwxyz0123456789"))[:length]


def _template(spec: Any) -> dict:
    return {"spec": {"template": spec}}


def _containers(value: Any) -> dict:
    return _template({"spec": {"restartPolicy": "Never", "containers": value}})


def _storage(download: dict | None = None, hf: bool = False) -> dict:
    out: dict[str, Any] = {"storageEnabled": True, "data": {"storageSize": "1Gi"}}
    if download:
        out["data"]["download"] = download
    if hf:
        out["huggingFace"] = {"storageSize": "1Gi", "preCacheRepos": [{"repoId": "org/model"}]}
    return out


def _s3(secret_name: str, endpoint: str = "http://minio:9000") -> dict:
    return {"s3": [{"endpointUrl": endpoint, "accessKeyId": {"secretName": secret_name, "secretKey": "id"},
                    "secretKey": {"secretName": secret_name, "secretKey": "key"},
                    "buckets": [{"name": "b", "files": [{"path": "a", "targetPath": "a"}]}]}]}


def catalogue(rng: random.Random) -> list[Case]:
    """Every hostile case, with the random parts drawn from ``rng``."""
    n = lambda: _name(rng)  # noqa: E731
    ray = {"entrypoint": "python x.py"}
    cases = [
        # --- embedded specs of the wrong shape (the builders name the field)
        Case("containers of strings", "KaiwoJob", n(), {"job": _containers(["x"])}, "failed",
             "spec.job.spec.template.spec.containers[0]", True),
        Case("template.metadata a string", "KaiwoJob", n(),
             {"job": _template({"metadata": "x", "spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}})},
             "failed", "spec.job.spec.template.metadata", True),
        Case("container resources a string", "KaiwoJob", n(), {"job": _containers([{"name": "c", "resources": "x"}])},
             "failed", "spec.job.spec.template.spec.containers[0].resources", True),
        Case("volumes a string", "KaiwoJob", n(),
             {"job": _template({"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}], "volumes": "x"}})},
             "failed", "spec.job.spec.template.spec.volumes", True),
        Case("deployment selector a string", "KaiwoService", n(),
             {"deployment": {"spec": {"selector": "x", "template": {"spec": {"containers": [{"name": "c"}]}}}}},
             "failed", "spec.deployment.spec.selector", True),
        Case("rayJob.spec a string", "KaiwoJob", n(), {**ray, "rayJob": {"spec": "oops"}}, "failed", "spec.rayJob.spec", True),
        Case("rayClusterSpec a string", "KaiwoJob", n(), {**ray, "rayJob": {"spec": {"rayClusterSpec": "x"}}},
             "failed", "spec.rayJob.spec.rayClusterSpec", True),
        Case("workerGroupSpecs a string", "KaiwoService", n(),
             {"rayService": {"spec": {"rayClusterConfig": {"workerGroupSpecs": "x"}}}},
             "failed", "spec.rayService.spec.rayClusterConfig.workerGroupSpecs", True),
        # --- credentials that must not reach the plain download ConfigMap
        Case("git token as URL username", "KaiwoJob", n(),
             {"storage": _storage({"git": [{"repository": "https://ghp_SECRET@github.com/o/r.git", "targetPath": "r"}]})},
             "failed", "spec.storage.data.download.git[0].repository", True),
        Case("credentials in S3 endpointUrl", "KaiwoJob", n(),
             {"storage": _storage(_s3("s3", endpoint="http://AKIA:s3cret@minio:9000"))},
             "failed", "spec.storage.data.download.s3[0].endpointUrl", True),
        Case("secret file is the SA token", "KaiwoJob", n(),
             {"storage": _storage({"git": [{"repository": "https://h/r.git", "targetPath": "r",
                                            "token": {"file": "/var/run/secrets/kubernetes.io/serviceaccount/token"}}]})},
             "failed", "spec.storage.data.download.git[0].token.file", True),
        # --- overflow
        Case("duration 99999999999h", "KaiwoJob", n(), {"duration": "99999999999h"}, "failed", "spec.duration", True),
        Case("quantity 1e99 (parses the pattern, out of range)", "KaiwoJob", n(),
             {"resources": {"limits": {"cpu": "1e99"}}}, "failed", "spec.resources.limits.cpu"),
        Case("quantity 1e9999999", "KaiwoJob", n(), {"resources": {"limits": {"memory": "1e9999999"}}}, "refused",
             "spec.resources.limits.memory"),
        # --- long user strings copied into messages and labels
        Case("63-character unknown queue", "KaiwoJob", n(), {"clusterQueue": "q" * 63}, "failed", ""),
        Case("64-character queue", "KaiwoJob", n(), {"clusterQueue": "q" * 64}, "refused", "spec.clusterQueue"),
        Case("queue with spaces", "KaiwoService", n(), {"clusterQueue": "Team Queue"}, "refused", "spec.clusterQueue"),
        Case("63-character unknown GPU vendor", "KaiwoJob", n(), {"gpus": 1, "gpuVendor": "v" * 63}, "failed",
             "spec.gpuVendor"),
        Case("253-character user with odd characters", "KaiwoJob", n(),
             {"user": ("Ünïcode User <x@y.z> " * 20)[:253]}, "runs"),
        Case("1 MiB-ish entrypoint with no script", "KaiwoJob", n(), {"entrypoint": "#!/bin/sh" + " " * 100_000},
             "failed", "spec.entrypoint"),
    ]
    # --- derived names at the lengths that used to collide (55..63) and beyond
    for length in sorted(rng.sample(range(55, 64), 3)) + [rng.randint(64, 100)]:
        secret = rng.choice(["cred.with.dots", "s" * 60, "tls.example.com-" + "x" * 50])
        cases.append(Case(f"name of {length} characters with storage and secret {secret[:20]}...", "KaiwoJob",
                          _name(rng, length), {"storage": _storage(_s3(secret), hf=True)},
                          "runs", extra={"secret": secret}))
    # unstructured fields nested past what the operator's JSON codec re-encodes (254 levels)
    for field in ("job", "rayJob"):
        depth = rng.randint(255, 700)
        cases.append(Case(f"spec.{field} nested {depth} levels", "KaiwoJob", f"deep-{field.lower()}-{depth}",
                          {field: {"x": _nested(depth)}}, "failed", f"spec.{field}.x"))
    # past 63 characters the main Job's own name is invalid: the apiserver refuses it
    cases.append(Case("job name over 63 characters, no storage", "KaiwoJob", _name(rng, rng.randint(64, 120)),
                      {"entrypoint": "sleep 1"}, "failed", "is invalid"))
    return cases


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with own_plane(tmp_path_factory, "hostile-plane") as p:
        yield p


@pytest.fixture(scope="module")
def kube(plane):
    with plane.http() as h:
        yield h


@pytest.fixture
async def operator(plane, kube, monkeypatch):
    async with _running_operator(plane, monkeypatch) as mgr:
        yield mgr


@contextlib.asynccontextmanager
async def _running_operator(plane, monkeypatch):
    from kaiwo_ctrl.operator import build_operator
    from kaiwo_ctrl.runtime.api.client import Client
    from kaiwo_ctrl.runtime.manager.manager import Manager
    from kaiwo_ctrl.runtime.observe.metrics import Metrics
    from kaiwo_ctrl.workloads.reconcile import controller as workloads

    monkeypatch.setenv(workloads.IMAGE_ENV, "registry.example/kaiwo-ctrl:test")
    client = await Client.from_kubeconfig(str(plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="0", health_addr=f"127.0.0.1:{_free_port()}")
    await build_operator(mgr, workers=4)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(mgr.is_leader.wait(), 120)
    yield mgr
    stop.set()
    await asyncio.wait_for(task, 60)


async def _health(operator) -> httpx.Response:
    # async: the operator serves /healthz from this same event loop
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(f"http://127.0.0.1:{operator.bound['health']}/healthz")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- helpers


def _url(kind: str, ns: str, name: str = "") -> str:
    base = f"{KAIWO}/namespaces/{ns}/{PLURAL[kind]}"
    return f"{base}/{name}" if name else base


def _create(kube, ns: str, case: Case) -> httpx.Response:
    body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": case.kind, "metadata": {"name": case.name},
            "spec": {"image": "busybox", "user": "hostile@example.com", **case.spec}}
    return kube.post(_url(case.kind, ns), json=body)


def _judge(case: Case, status: dict) -> str | None:
    """None when the status is what the case needs, else why not."""
    state = status.get("status")
    if not state:
        return "no status"
    conds = status.get("conditions") or []
    for c in conds:
        if len(c.get("message") or "") > MESSAGE_LIMIT:
            return f"condition {c['type']} message of {len(c['message'])} characters"
    if case.expect == "runs":
        return f"status {state}: {conds}" if state in FAILED_STATES else None
    if state not in FAILED_STATES:
        return f"status {state}, expected ERROR/FAILED"
    failing = [c for c in conds if c.get("status") == "False" and c.get("message")]
    if not failing:
        return f"status {state} without a failing condition with a message: {conds}"
    if case.field and not any(case.field in c["message"] for c in failing):
        return f"no condition names {case.field}: {[c['message'][:200] for c in failing]}"
    return None


async def _settled(kube, urls: list[str]) -> None:
    """Wait until no object's resourceVersion changes across a 3-second window."""
    def versions() -> dict[str, str]:
        return {u: (kube.get(u).json().get("metadata") or {}).get("resourceVersion", "") for u in urls}

    state = {"last": versions(), "since": asyncio.get_running_loop().time()}

    def stable() -> bool:
        now, cur = asyncio.get_running_loop().time(), versions()
        if cur != state["last"]:
            state["last"], state["since"] = cur, now
        return now - state["since"] >= 3.0

    await eventually(stable, timeout=120, interval=0.5, what="resourceVersions to settle")


# --------------------------------------------------------------------------- the test


def _run_cases(kube, ns: str, cases: list[Case]) -> tuple[list[Case], list[str]]:
    accepted, problems = [], []
    for case in cases:
        r = _create(kube, ns, case)
        if case.expect == "refused":
            if r.status_code != 422 or (case.field and case.field not in r.text):
                problems.append(f"[{case.label}] expected a 422 naming {case.field}, got {r.status_code}: {r.text[:300]}")
        elif r.status_code != 201:
            problems.append(f"[{case.label}] refused by the apiserver: {r.status_code} {r.text[:300]}")
        else:
            accepted.append(case)
    return accepted, problems


async def _check_statuses(kube, ns: str, accepted: list[Case], timeout: float = 90) -> dict[str, str]:
    """Wait (bounded) for every accepted case's status; return label -> problem."""
    pending = {c.label: c for c in accepted}
    verdicts: dict[str, str | None] = {}

    def poll() -> bool:
        for label, case in list(pending.items()):
            status = (kube.get(_url(case.kind, ns, case.name)).json().get("status")) or {}
            verdict = _judge(case, status)
            verdicts[label] = verdict
            if verdict is None:
                del pending[label]
        return not pending

    try:
        await eventually(poll, timeout=timeout, interval=0.5, what="a status on every hostile object")
    except AssertionError:
        pass  # reported per case below
    return {label: v for label, v in verdicts.items() if v is not None}


def _check_children(kube, ns: str, accepted: list[Case]) -> list[str]:
    problems = []
    for case in accepted:
        if "secret" not in case.extra or case.expect != "runs":
            continue
        pvcs = [p["metadata"]["name"] for p in kube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims").json()["items"]
                if any(o["name"] == case.name for o in p["metadata"].get("ownerReferences") or [])]
        jobs = [j for j in kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs").json()["items"]
                if any(o["name"] == case.name for o in j["metadata"].get("ownerReferences") or [])]
        if len(set(pvcs)) != 2:
            problems.append(f"[{case.label}] expected two distinct PVCs, got {pvcs}")
        if not jobs or any(j["metadata"]["name"] == case.name for j in jobs):
            problems.append(f"[{case.label}] the download Job is missing or took the workload's name: {[j['metadata']['name'] for j in jobs]}")
        for j in jobs:
            vols = [v["name"] for v in j["spec"]["template"]["spec"]["volumes"]]
            if not all(is_dns1123_label(v) for v in vols):
                problems.append(f"[{case.label}] invalid volume names {vols}")
    return problems


def _split(cases: list[Case], catch_all: bool) -> list[Case]:
    return [c for c in cases if c.needs_catch_all == catch_all]


async def _exercise(kube, operator, cases: list[Case]) -> None:
    ns = f"hostile-{uuid.uuid4().hex[:6]}"
    assert kube.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    accepted, problems = _run_cases(kube, ns, cases)
    statuses = await _check_statuses(kube, ns, accepted)
    problems += [f"[{label}] {why}" for label, why in statuses.items()]
    problems += _check_children(kube, ns, accepted)
    # the operator is healthy and the accepted objects stop changing
    health = await _health(operator)
    if health.status_code != 200:
        problems.append(f"operator unhealthy: {health.status_code} {health.text}")
    await _settled(kube, [_url(c.kind, ns, c.name) for c in accepted])
    # a valid KaiwoJob afterwards still converges (its Job is created, status set)
    good = Case("valid job", "KaiwoJob", "valid-after-hostile", {"entrypoint": "sleep 1"}, "runs")
    assert _create(kube, ns, good).status_code == 201
    await eventually(lambda: kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{good.name}").status_code == 200,
                     timeout=60, what="the valid KaiwoJob's Job")
    verdict = await _check_statuses(kube, ns, [good], timeout=60)
    problems += [f"[valid job afterwards] {why}" for why in verdict.values()]
    assert not problems, f"seed {SEED}:\n  " + "\n  ".join(problems)


async def test_hostile_workloads_end_in_a_status(kube, operator):
    """Cases whose status comes from checks the builders/validators make themselves."""
    await _exercise(kube, operator, _split(catalogue(random.Random(SEED)), catch_all=False))


async def test_hostile_embedded_specs_end_in_an_error_status(kube, operator):
    """Cases where a builder raises a FieldError that the generic reconciler must
    turn into an ERROR status naming the field (the reconciler's catch-all)."""
    await _exercise(kube, operator, _split(catalogue(random.Random(SEED)), catch_all=True))


async def test_hostile_queue_config_edits(kube, operator):
    """One overflowing quota fails its own item; the rest of the queue config is applied;
    CEL refuses a second queue config and over-long names."""
    bad_name = kube.post(QC_URL, json={"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoQueueConfig",
                                       "metadata": {"name": "other"}, "spec": {}})
    assert bad_name.status_code == 422 and "metadata.name must be 'kaiwo'" in bad_name.text
    await eventually(lambda: kube.get(f"{QC_URL}/kaiwo").status_code == 200, timeout=60, what="the default queue config")

    def quota(value: str) -> dict:
        return {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": value}]}]}]}

    spec = {"resourceFlavors": [{"name": "default-flavor"}],
            "clusterQueues": [{"name": "kaiwo", "spec": quota("4")}, {"name": "overflow", "spec": quota("1e9999999")},
                              {"name": "good-q", "spec": quota("8")}]}
    r = kube.patch(f"{QC_URL}/kaiwo", json={"spec": spec}, headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    too_long = kube.patch(f"{QC_URL}/kaiwo", json={"spec": {"clusterQueues": [{"name": "q" * 254}]}},
                          headers={"Content-Type": "application/merge-patch+json"})
    assert too_long.status_code == 422

    def failed_naming_the_item():
        st = kube.get(f"{QC_URL}/kaiwo").json().get("status") or {}
        msgs = " ".join(c.get("message") or "" for c in st.get("conditions") or [])
        return st.get("status") == "FAILED" and "clusterQueues[1]" in msgs and st
    st = await eventually(failed_naming_the_item, timeout=60, what="queue config FAILED naming clusterQueues[1]")
    assert all(len(c.get("message") or "") <= MESSAGE_LIMIT for c in st["conditions"])
    # the good queues were still applied
    for name in ("kaiwo", "good-q"):
        await eventually(lambda n=name: kube.get(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{n}").status_code == 200,
                         timeout=60, what=f"ClusterQueue {name}")
    assert kube.get("/apis/kueue.x-k8s.io/v1beta2/clusterqueues/overflow").status_code == 404
    await _settled(kube, [f"{QC_URL}/kaiwo"])
    health = await _health(operator)
    assert health.status_code == 200, health.text


# --------------------------------------------------------------- deep nesting


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def _deep_body(name: str, levels: int) -> bytes:
    """A KaiwoJob whose spec.job.x nests ``levels`` deep, as bytes (no Python
    or orjson encoder writes 1,100 levels)."""
    inner = '{"a":' * levels + "1" + "}" * levels
    return (f'{{"apiVersion":"kaiwo.silogen.ai/v1alpha1","kind":"KaiwoJob","metadata":{{"name":"{name}"}},'
            f'"spec":{{"user":"hostile@example.com","image":"busybox","job":{{"x":{inner}}}}}}}').encode()


def _status_of_deep(kube, ns: str, name: str) -> dict:
    info = undecodable(kube.get(_url("KaiwoJob", ns, name)).content)
    assert info is not None
    return info.stub


def _skipped(mgr) -> float:
    return mgr.metrics.informer_skipped_objects.labels(kind="KaiwoJob")._value.get()


async def test_deeply_nested_kaiwojobs_never_stop_the_operator(plane, kube, monkeypatch):
    """KaiwoJobs nested 300 levels (decodes, cannot be encoded again) and
    1,100 (cannot be decoded) next to normal ones: the deep ones are left out
    of the cache and get ERROR naming spec.job.x; the normal ones converge,
    before and after a restart of the manager with the deep ones present."""
    ns = f"deep-{uuid.uuid4().hex[:6]}"
    assert kube.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    deep = {"deep-300": 300, "deep-1100": 1100}
    for name, levels in deep.items():
        r = kube.post(_url("KaiwoJob", ns), content=_deep_body(name, levels), headers={"Content-Type": "application/json"})
        assert r.status_code == 201, r.text[:300]
    inner = '{"a":' * 1100 + "1" + "}" * 1100
    model = ('{"apiVersion":"kubeai.org/v1","kind":"Model","metadata":{"name":"deep-model"},"spec":{"url":"hf://org/m",'
             f'"engine":"VLLM","features":["TextGeneration"],"envFrom":[{{"x":{inner}}}]}}}}').encode()
    models = f"/apis/kubeai.org/v1/namespaces/{ns}/models"
    r = kube.post(models, content=model, headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text[:300]
    versions = {}
    async with _running_operator(plane, monkeypatch) as mgr:
        assert _create(kube, ns, Case("normal", "KaiwoJob", "normal-1", {"entrypoint": "sleep 1"}, "runs")).status_code == 201
        await eventually(lambda: kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/normal-1").status_code == 200,
                         timeout=60, what="the normal KaiwoJob's Job")
        for name in deep:
            def reported(n=name):
                st = _status_of_deep(kube, ns, n).get("status") or {}
                msgs = [c.get("message") or "" for c in st.get("conditions") or []]
                return st.get("status") == "ERROR" and any(m.startswith("spec.job.x.a") and "nested deeper" in m for m in msgs)
            await eventually(reported, timeout=60, what=f"{name} in ERROR naming spec.job.x")
            versions[name] = _status_of_deep(kube, ns, name)["metadata"]["resourceVersion"]
        assert _skipped(mgr) >= 2

        def model_reported():
            conds = (undecodable(kube.get(f"{models}/deep-model").content).stub.get("status") or {}).get("conditions") or []
            return any(c["type"] == "ConfigValid" and c["status"] == "False" and c["message"].startswith("spec.envFrom[0].x.a")
                       for c in conds)
        await eventually(model_reported, timeout=60, what="the deep Model ConfigValid=False naming spec.envFrom[0].x")
        assert {f"{ns}/{n}" for n in deep} <= set(mgr.cache.informer(KAIWOJOBS).skipped.seen)
        assert {o["metadata"]["name"] for o in mgr.cache.informer(KAIWOJOBS).list(ns)} == {"normal-1"}
        health = await _health(mgr)
        assert health.status_code == 200, health.text
    async with _running_operator(plane, monkeypatch) as mgr:  # a start-up with them present
        informer = mgr.cache.informer(KAIWOJOBS)
        assert await informer.wait_synced(60), informer.last_error
        assert _create(kube, ns, Case("normal", "KaiwoJob", "normal-2", {"entrypoint": "sleep 1"}, "runs")).status_code == 201
        await eventually(lambda: kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/normal-2").status_code == 200,
                         timeout=60, what="a KaiwoJob created after the restart converges")
        assert {o["metadata"]["name"] for o in informer.list(ns)} == {"normal-1", "normal-2"}
        # each deep object left out and counted once (other tests' deep objects may be listed too)
        assert {k for k in informer.skipped.seen if k.startswith(f"{ns}/")} == {f"{ns}/{n}" for n in deep}
        assert _skipped(mgr) == len(informer.skipped.seen)
        # the ERROR is already written: the restarted operator does not write it again
        assert {n: _status_of_deep(kube, ns, n)["metadata"]["resourceVersion"] for n in deep} == versions
