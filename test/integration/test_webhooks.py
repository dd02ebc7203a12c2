"""Admission webhooks, called for real by a real kube-apiserver.

The operator runs as ``kaiwo-ctrl run --webhook-bind-address 127.0.0.1:P
--webhook-url-host 127.0.0.1``: it writes its certificate Secret, registers
the webhook configurations with ``clientConfig.url`` and serves them. The
tests own cluster-wide webhook configurations, so they run on a control plane
of their own. Enforcement is on, limited to namespaces labelled
``kaiwo-test/enforce=true``; the serving certificate lives 45 s, so it rotates
every 30 s while the tests run.

No controller-manager runs: the tests play the Job controller by patching Job
status, and Kueue by admitting Workloads.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import ssl
import time
import uuid

import httpx
import pytest
from cryptography import x509

from kaiwo_ctrl.local.controlplane import free_port
from support import eventually
from support.planes import own_plane
from support.operator import OperatorProcess
from test_workloads_support import admit, complete_job, ensure_queue_config, patch_status, wait_status
from support.admin import admin_http

pytestmark = pytest.mark.integration

OP_NS = "kaiwo-system"
SECRET = f"/api/v1/namespaces/{OP_NS}/secrets/kaiwo-webhook-server-cert"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kaiwo-mutating-webhook-configuration"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kaiwo-validating-webhook-configuration"
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
MANAGED = "kaiwo.silogen.ai/managed"
FINALIZER = "kaiwo.silogen.ai/finalizer"
ENFORCE_LABEL = "kaiwo-test/enforce"
DRY = {"dryRun": "All"}


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with own_plane(tmp_path_factory, "webhook-plane") as cp:
        yield cp


@pytest.fixture(scope="module")
def admin(plane):
    with admin_http(plane) as h:
        r = h.post("/api/v1/namespaces", json={"metadata": {"name": OP_NS}})
        assert r.status_code == 201, r.text
        ensure_queue_config(h)
        yield h


def start_operator(plane, log, *, webhooks: bool = True) -> OperatorProcess:
    port = free_port()
    args = ["--log-level=debug", f"--webhook-bind-address=127.0.0.1:{port}", "--webhook-url-host=127.0.0.1"] if webhooks else []
    env = {"ENFORCE_KAIWO_ON_GPU_WORKLOADS": "True", "ENFORCEMENT_NAMESPACE_SELECTOR": f"{ENFORCE_LABEL}=true",
           "WEBHOOK_CERT_VALIDITY": "45s", "KAIWO_CTRL_IMAGE": "registry.example/kaiwo-ctrl:test"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        op = OperatorProcess(str(plane.kubeconfig), log, *args)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    op.webhook_port = port  # type: ignore[attr-defined]
    return op


@pytest.fixture(scope="module")
def operator(plane, admin, tmp_path_factory):
    op = start_operator(plane, tmp_path_factory.mktemp("op") / "operator.log")
    yield op
    op.stop()


def new_namespace(admin, enforce: bool = False) -> str:
    name = f"w-{uuid.uuid4().hex[:8]}"
    labels = {ENFORCE_LABEL: "true"} if enforce else {}
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": name, "labels": labels}})
    assert r.status_code == 201, r.text
    return name


def job_body(name: str, labels: dict | None = None, gpu: str | None = None) -> dict:
    container = {"name": "c", "image": "busybox", "command": ["true"]}
    if gpu:
        container["resources"] = {"limits": {gpu: "1"}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


def jobs_url(ns: str, name: str = "") -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs" + (f"/{name}" if name else "")


def kaiwojob_url(ns: str, name: str = "") -> str:
    return f"{KAIWO}/namespaces/{ns}/kaiwojobs" + (f"/{name}" if name else "")


def delete(admin, url: str, dry_run: bool = False) -> None:
    """Background propagation: the API's default for Jobs is "orphan", whose
    finalizer only the garbage collector (not running here) would remove."""
    body = {"propagationPolicy": "Background", **({"dryRun": ["All"]} if dry_run else {})}
    r = admin.request("DELETE", url, json=body)
    assert r.status_code == 200, r.text


def get(admin, url: str) -> dict | None:
    r = admin.get(url)
    return r.json() if r.status_code == 200 else None


def exists(admin, url: str) -> bool:
    return admin.get(url).status_code == 200


def refused_by_webhook(r, webhook: str) -> str:
    assert r.status_code >= 400, f"expected a refusal, got {r.status_code}: {r.text[:300]}"
    message = r.json().get("message", "")
    assert f'admission webhook "{webhook}" denied the request' in message, message
    return message


async def webhooks_serving(admin) -> bool:
    """Configurations registered with a CA bundle and the server answering."""
    for url in (MUTATING, VALIDATING):
        r = admin.get(url)
        if r.status_code != 200 or not all(w["clientConfig"].get("caBundle") for w in r.json()["webhooks"]):
            return False
    body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": "probe"},
            "spec": {"gpus": 1, "gpusPerReplica": 2, "replicas": 1, "user": "probe"}}
    r = admin.post(kaiwojob_url("default"), json=body, params=DRY)
    return r.status_code == 403


@pytest.fixture(scope="module")
async def serving(operator, admin):
    await eventually(lambda: webhooks_serving(admin), timeout=90, interval=0.5, what="webhooks registered and serving")
    return operator


def webhook_requests(op: OperatorProcess, path: str) -> float:
    return op.metric_sum("controller_runtime_webhook_requests_total", webhook=path)


# ------------------------------------------------------------------ Jobs


async def test_labelled_job_is_adopted_and_followed_to_completion(serving, admin):
    ns = new_namespace(admin)
    r = admin.post(jobs_url(ns), json=job_body("trainer", {MANAGED: "true"}))
    assert r.status_code == 201, r.text
    job = r.json()
    labels = job["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "kaiwo"
    assert labels["kaiwo.silogen.ai/user"] == "admin" and labels["kaiwo.silogen.ai/name"] == "trainer"
    assert labels["kaiwo.silogen.ai/type"] == "job" and labels["kaiwo.silogen.ai/run-id"] == ""
    assert FINALIZER in job["metadata"]["finalizers"]
    kj = await eventually(lambda: get(admin, kaiwojob_url(ns, "trainer")), what="tracking KaiwoJob")
    assert kj["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert kj["spec"]["user"] == "admin"
    assert kj["spec"]["job"]["metadata"]["name"] == "trainer"
    assert kj["spec"]["job"]["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox"
    assert FINALIZER not in (kj["spec"]["job"]["metadata"].get("finalizers") or [])
    assert exists(admin, f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues/kaiwo")

    await wait_status(admin, "KaiwoJob", ns, "trainer", "PENDING")
    admit(admin, ns, job)
    patch_status(admin, jobs_url(ns, "trainer"), {"startTime": "2026-01-01T00:00:00Z", "active": 1, "ready": 1})
    await wait_status(admin, "KaiwoJob", ns, "trainer", "RUNNING")
    complete_job(admin, jobs_url(ns, "trainer"))
    await wait_status(admin, "KaiwoJob", ns, "trainer", "COMPLETE")
    after = admin.get(jobs_url(ns, "trainer")).json()
    assert not after["metadata"].get("ownerReferences"), "the adopted Job must not be owned by its KaiwoJob"

    delete(admin, jobs_url(ns, "trainer"))
    await eventually(lambda: not exists(admin, jobs_url(ns, "trainer")), what="Job gone (finalizer released)")
    await eventually(lambda: not exists(admin, kaiwojob_url(ns, "trainer")), what="tracking KaiwoJob deleted")


async def test_generated_names_are_tracked(serving, admin):
    ns = new_namespace(admin)
    body = job_body("", {MANAGED: "true"})
    body["metadata"] = {"generateName": "gen-", "labels": {MANAGED: "true"}}
    r = admin.post(jobs_url(ns), json=body)
    assert r.status_code == 201, r.text
    name = r.json()["metadata"]["name"]
    assert name.startswith("gen-") and FINALIZER in r.json()["metadata"]["finalizers"]
    kj = await eventually(lambda: get(admin, kaiwojob_url(ns, name)), what="tracking KaiwoJob of a generated name")
    assert kj["metadata"]["labels"]["kaiwo.silogen.ai/name"] == name


async def test_unlabelled_job_is_untouched_and_never_reaches_the_webhook(serving, admin):
    """The counters are incremented before the webhook answers, so they are
    current as soon as the apiserver has answered the test."""
    ns = new_namespace(admin)
    paths = ("/mutate-batch-v1-job", "/validate-batch-v1-job")
    before = {p: webhook_requests(serving, p) for p in paths}
    r = admin.post(jobs_url(ns), json=job_body("plain", {"team": "a"}, gpu="amd.com/gpu"))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["metadata"]["labels"] == {"team": "a"} and not job["metadata"].get("finalizers")
    delete(admin, jobs_url(ns, "plain"))
    assert {p: webhook_requests(serving, p) for p in paths} == before
    assert not exists(admin, kaiwojob_url(ns, "plain")) and not exists(admin, jobs_url(ns, "plain"))
    # the control: a labelled Job does reach both
    assert admin.post(jobs_url(ns), json=job_body("labelled", {MANAGED: "true"})).status_code == 201
    assert webhook_requests(serving, paths[0]) > before[paths[0]]
    await eventually(lambda: exists(admin, kaiwojob_url(ns, "labelled")), what="tracking KaiwoJob")
    delete(admin, jobs_url(ns, "labelled"))
    assert webhook_requests(serving, paths[1]) > before[paths[1]]


async def test_enforcement_adopts_or_refuses_gpu_jobs_and_leaves_cpu_jobs(serving, admin):
    ns = new_namespace(admin, enforce=True)
    r = admin.post(jobs_url(ns), json=job_body("gpu-opt-out", {MANAGED: "false"}, gpu="nvidia.com/gpu"))
    message = refused_by_webhook(r, "enforce-validate-jobs.kaiwo.silogen.ai")
    assert "metadata.labels[kaiwo.silogen.ai/managed]" in message
    assert "all jobs must have 'kaiwo.silogen.ai/managed' label" in message

    r = admin.post(jobs_url(ns), json=job_body("gpu", gpu="amd.com/gpu"))
    assert r.status_code == 201, r.text
    assert r.json()["metadata"]["labels"][MANAGED] == "true"
    await eventually(lambda: exists(admin, kaiwojob_url(ns, "gpu")), what="GPU Job adopted")

    r = admin.post(jobs_url(ns), json=job_body("cpu"))
    assert r.status_code == 201, r.text
    assert MANAGED not in r.json()["metadata"]["labels"] and not r.json()["metadata"].get("finalizers")
    r = admin.post(jobs_url(ns), json=job_body("cpu-opt-out", {MANAGED: "false"}))
    assert r.status_code == 201, r.text
    assert not exists(admin, kaiwojob_url(ns, "cpu"))

    other = new_namespace(admin)  # not selected by the enforcement namespaceSelector
    r = admin.post(jobs_url(other), json=job_body("gpu-elsewhere", {MANAGED: "false"}, gpu="amd.com/gpu"))
    assert r.status_code == 201, r.text


async def test_dry_run_creates_nothing(serving, admin):
    ns = new_namespace(admin)
    r = admin.post(jobs_url(ns), json=job_body("dry", {MANAGED: "true"}), params=DRY)
    assert r.status_code == 201, r.text
    assert FINALIZER in r.json()["metadata"]["finalizers"], "the mutation itself still applies on dry-run"
    assert not exists(admin, jobs_url(ns, "dry"))
    assert not exists(admin, kaiwojob_url(ns, "dry"))
    assert not exists(admin, f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues/kaiwo")
    # a dry-run delete of an adopted Job releases nothing and deletes nothing
    assert admin.post(jobs_url(ns), json=job_body("real", {MANAGED: "true"})).status_code == 201
    await eventually(lambda: exists(admin, kaiwojob_url(ns, "real")), what="tracking KaiwoJob")
    delete(admin, jobs_url(ns, "real"), dry_run=True)
    job = admin.get(jobs_url(ns, "real")).json()
    assert FINALIZER in job["metadata"]["finalizers"] and exists(admin, kaiwojob_url(ns, "real"))


# ------------------------------------------------------------ our kinds

WORKLOAD = {"user": "someone@example.com", "image": "busybox", "entrypoint": "true"}
STORAGE = {"storageEnabled": True, "storageClassName": "standard", "data": {"mountPath": "/data"}}
CQ = {"name": "q1", "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
    {"name": "flv", "resources": [{"name": "cpu", "nominalQuota": "1"}]}]}]}}

#: (kind, field path, spec that must be refused, spec at the boundary that must be accepted)
SEMANTIC = [
    ("KaiwoJob", "spec.resources.limits.cpu",
     {**WORKLOAD, "resources": {"limits": {"cpu": "-1"}}}, {**WORKLOAD, "resources": {"limits": {"cpu": "0"}}}),
    ("KaiwoService", "spec.resources.requests.memory",
     {**WORKLOAD, "resources": {"requests": {"memory": "-1Gi"}}}, {**WORKLOAD, "resources": {"requests": {"memory": "1Gi"}}}),
    ("KaiwoJob", "spec.gpuVendor", {**WORKLOAD, "gpus": 1, "gpuVendor": "intel"}, {**WORKLOAD, "gpus": 1, "gpuVendor": "NVIDIA"}),
    ("KaiwoJob", "spec.gpusPerReplica",
     {**WORKLOAD, "gpus": 4, "replicas": 1, "gpusPerReplica": 5}, {**WORKLOAD, "gpus": 4, "replicas": 1, "gpusPerReplica": 4}),
    ("KaiwoJob", "spec.entrypoint", {**WORKLOAD, "entrypoint": "x" * 131072}, {**WORKLOAD, "entrypoint": "x" * 131071}),
    ("KaiwoService", "spec.storage.data.storageSize",
     {**WORKLOAD, "storage": {**STORAGE, "data": {"mountPath": "/data", "storageSize": "lots"}}},
     {**WORKLOAD, "storage": {**STORAGE, "data": {"mountPath": "/data", "storageSize": "1"}}}),
    ("KaiwoQueueConfig", "spec.clusterQueues[0].spec.resourceGroups[0].flavors[0].name",
     {"clusterQueues": [CQ], "resourceFlavors": [{"name": "other"}]},
     {"clusterQueues": [CQ], "resourceFlavors": [{"name": "flv"}]}),
    ("AIMNamespaceConfig", "spec.credentials.huggingFaceToken.secretKey",
     {"credentials": {"huggingFaceToken": {"secretName": "hf"}}},
     {"credentials": {"huggingFaceToken": {"secretName": "hf", "secretKey": "token"}}}),
]
URLS = {
    "KaiwoJob": f"{KAIWO}/namespaces/default/kaiwojobs",
    "KaiwoService": f"{KAIWO}/namespaces/default/kaiwoservices",
    "AIMNamespaceConfig": "/apis/config.kaiwo.silogen.ai/v1alpha1/namespaces/default/aimnamespaceconfigs",
}
API_VERSIONS = {"AIMNamespaceConfig": "config.kaiwo.silogen.ai/v1alpha1"}


def submit(admin, kind: str, spec: dict, name: str = "probe"):
    """A dry run: the validating webhooks are called all the same, and nothing is kept."""
    if kind == "KaiwoQueueConfig":  # a singleton that exists: change its spec
        return admin.patch(f"{KAIWO}/kaiwoqueueconfigs/kaiwo", json={"spec": spec}, params=DRY,
                           headers={"Content-Type": "application/merge-patch+json"})
    body = {"apiVersion": API_VERSIONS.get(kind, "kaiwo.silogen.ai/v1alpha1"), "kind": kind,
            "metadata": {"name": name}, "spec": spec}
    return admin.post(URLS[kind], json=body, params=DRY)


@pytest.mark.parametrize(("kind", "path", "bad", "good"), SEMANTIC, ids=[f"{k}:{p}" for k, p, _, _ in SEMANTIC])
async def test_semantic_validation_names_the_field_and_accepts_the_boundary(serving, admin, kind, path, bad, good):
    message = refused_by_webhook(submit(admin, kind, bad), f"validate-{kind.lower()}.kaiwo.silogen.ai")
    assert f"{path}: " in message, message
    r = submit(admin, kind, good)
    assert r.status_code in (200, 201), r.text


async def test_model_profiles_are_checked_against_the_model_configuration(serving, admin):
    """The operator runs with the built-in model configuration (KubeAI's chart
    profiles, no cache profiles); its Model webhook checks names against it
    with the Model controller's own checks."""
    url = "/apis/kubeai.org/v1/namespaces/default/models"

    def model(**spec) -> dict:
        return {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "m"},
                "spec": {"url": "hf://org/model", "engine": "VLLM", "features": ["TextGeneration"], **spec}}

    r = admin.post(url, json=model(resourceProfile="no-such-profile:1"), params=DRY)
    message = refused_by_webhook(r, "validate-model.kaiwo.silogen.ai")
    assert "spec.resourceProfile: unknown resource profile 'no-such-profile'" in message, message
    assert "nvidia-gpu-l4" in message, "the refusal lists the known profiles"
    r = admin.post(url, json=model(resourceProfile="nvidia-gpu-l4:1", cacheProfile="fast"), params=DRY)
    message = refused_by_webhook(r, "validate-model.kaiwo.silogen.ai")
    assert "spec.cacheProfile: " in message and "spec.resourceProfile" not in message, message
    r = admin.post(url, json=model(resourceProfile="nvidia-gpu-l4:1"), params=DRY)
    assert r.status_code == 201, r.text


# ------------------------------------------------------- TLS and failure


def served_serial(port: int) -> int:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def secret_serial(admin) -> int:
    data = admin.get(SECRET).json()["data"]
    return x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"])).serial_number


async def test_certificate_rotation_loses_no_request(serving, admin):
    """The serving certificate lives 45 s and is renewed with a third left, so
    within a minute it rotates; every request meanwhile must reach the webhook
    (a request that did not would be admitted: the webhooks fail open)."""
    port = serving.webhook_port
    served = [served_serial(port)]
    bad = {**WORKLOAD, "gpus": 1, "replicas": 1, "gpusPerReplica": 2}
    calls, deadline = 0, time.monotonic() + 120
    while len(served) < 2:
        assert time.monotonic() < deadline, f"no rotation within 120 s (served serials: {served})"
        refused_by_webhook(submit(admin, "KaiwoJob", bad), "validate-kaiwojob.kaiwo.silogen.ai")
        r = admin.post(jobs_url("default"), json=job_body("rot", {MANAGED: "true"}), params=DRY)
        assert r.status_code == 201 and FINALIZER in r.json()["metadata"]["finalizers"], r.text
        calls += 2
        now = served_serial(port)
        if now != served[-1]:
            served.append(now)
        await asyncio.sleep(0.05)  # pacing of the request stream, not a wait for a condition
    assert served[-1] == secret_serial(admin), "the server must present the certificate in the Secret"
    for _ in range(10):  # and after the rotation, requests keep reaching the webhooks
        refused_by_webhook(submit(admin, "KaiwoJob", bad), "validate-kaiwojob.kaiwo.silogen.ai")
    print(f"{calls} admission requests across a certificate rotation, none lost")


@pytest.mark.parametrize("levels", [150, 300, 1100])
async def test_deep_nesting_is_refused_at_admission(serving, admin, levels):
    """Unstructured fields (spec.job) may nest only 100 levels: deeper is refused
    naming the field. At 1,100 levels the review cannot even be decoded; the
    server used to answer 400 then, which the API server takes as a failure of
    a fail-open webhook, i.e. admission."""
    inner = '{"a":' * levels + "1" + "}" * levels
    body = ('{"apiVersion":"kaiwo.silogen.ai/v1alpha1","kind":"KaiwoJob","metadata":{"name":"deep"},'
            f'"spec":{{"user":"u","image":"busybox","job":{{"x":{inner}}}}}}}').encode()
    r = admin.post(kaiwojob_url("default"), content=body, params=DRY, headers={"Content-Type": "application/json"})
    message = refused_by_webhook(r, "validate-kaiwojob.kaiwo.silogen.ai")
    assert "spec.job.x.a" in message and "must not nest deeper than 100 levels" in message, message


# ------------------------------------------------- forged reviews


def forge(op: OperatorProcess, path: str, request: dict) -> dict:
    """POST an AdmissionReview straight to the webhook port, as any Pod that
    reaches the Service could (the API server is not involved)."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": str(uuid.uuid4()), "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                          "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                          "userInfo": {"username": "system:serviceaccount:team-a:default"}, **request}}
    r = httpx.post(f"https://127.0.0.1:{op.webhook_port}{path}", json=review, verify=False, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["response"]


async def logged(op: OperatorProcess, *parts: str) -> None:
    def found() -> bool:
        return any(all(p in line for p in parts) for line in op.log_text().splitlines())
    await eventually(found, timeout=30, what=f"operator log line with {parts}")


async def test_forged_delete_reviews_release_and_delete_nothing(serving, admin):
    """Six forged DELETE reviews of another tenant's adopted Job: each is
    checked against the API server, which shows the Job alive, so its finalizer
    and its KaiwoJob stay."""
    victim = new_namespace(admin)
    job = admin.post(jobs_url(victim), json=job_body("x", {MANAGED: "true"})).json()
    await eventually(lambda: exists(admin, kaiwojob_url(victim, "x")), what="tracking KaiwoJob")
    uid, path = job["metadata"]["uid"], "/validate-batch-v1-job"
    stored = admin.get(jobs_url(victim, "x")).json()
    wrong = {**stored, "metadata": {**stored["metadata"], "uid": str(uuid.uuid4())}}
    stamped = {**stored, "metadata": {**stored["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    cases = [stored, wrong, stamped, {**stored, "metadata": {**stored["metadata"], "uid": ""}},
             {**stored, "metadata": {**stored["metadata"], "name": "no-such-job"}}, {}]
    for old in cases:
        resp = forge(serving, path, {"operation": "DELETE", "namespace": victim, "name": "x", "oldObject": old})
        assert resp["allowed"] is True, resp  # a DELETE is never refused; it just does nothing
    await logged(serving, "does not show being deleted", uid)
    await logged(serving, "is not the one being deleted", wrong["metadata"]["uid"])
    after = admin.get(jobs_url(victim, "x")).json()
    assert after["metadata"]["uid"] == uid and not after["metadata"].get("deletionTimestamp")
    assert FINALIZER in after["metadata"]["finalizers"]
    assert exists(admin, kaiwojob_url(victim, "x"))
    # the control: a real delete still releases the finalizer and deletes the KaiwoJob
    delete(admin, jobs_url(victim, "x"))
    await eventually(lambda: not exists(admin, jobs_url(victim, "x")), what="Job gone (finalizer released)")
    await eventually(lambda: not exists(admin, kaiwojob_url(victim, "x")), what="tracking KaiwoJob deleted")


LOCALQUEUES = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues"


async def test_forged_create_reviews_make_no_local_queue(serving, admin):
    """Forged CREATE reviews of Jobs that will never be stored: the open queue
    ('kaiwo') is allowed but nothing is made; the restricted one ('team-only',
    namespaces: [team-namespace]), one not listed and one without a ClusterQueue
    are refused, naming the label."""
    ns = new_namespace(admin)
    path = "/mutate-batch-v1-job"
    qc = admin.get(f"{KAIWO}/kaiwoqueueconfigs/kaiwo").json()
    entries = qc["spec"]["clusterQueues"]
    if not any(e["name"] == "listed-no-cq" for e in entries):
        r = admin.patch(f"{KAIWO}/kaiwoqueueconfigs/kaiwo", json={"spec": {"clusterQueues": entries + [
            {"name": "listed-no-cq", "spec": {}}]}}, headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
    refused = {"team-only": "use one of these namespaces", "not-in-config": "is not listed in the KaiwoQueueConfig"}
    for queue, why in refused.items():
        body = job_body(f"forged-{queue}", {MANAGED: "true", "kueue.x-k8s.io/queue-name": queue})
        resp = forge(serving, path, {"operation": "CREATE", "namespace": ns, "name": body["metadata"]["name"], "object": body})
        assert resp["allowed"] is False, resp
        assert "metadata.labels[kueue.x-k8s.io/queue-name]" in resp["status"]["message"] and why in resp["status"]["message"]
    body = job_body("forged-open", {MANAGED: "true"})
    resp = forge(serving, path, {"operation": "CREATE", "namespace": ns, "name": "forged-open", "object": body})
    assert resp["allowed"] is True and resp.get("patch"), resp
    # the old handler made the LocalQueue before answering; now only a stored Job makes one
    assert admin.get(LOCALQUEUES.format(ns=ns)).json()["items"] == []
    assert admin.post(jobs_url(ns), json=job_body("real", {MANAGED: "true"})).status_code == 201
    await eventually(lambda: exists(admin, f"{LOCALQUEUES.format(ns=ns)}/kaiwo"), what="LocalQueue of a stored Job")
    assert [q["metadata"]["name"] for q in admin.get(LOCALQUEUES.format(ns=ns)).json()["items"]] == ["kaiwo"]


async def test_queue_label_cannot_borrow_another_teams_queue(serving, admin):
    """Through the API server: a Job in namespace C labelled with a queue whose
    KaiwoQueueConfig entry lists only other namespaces is refused, as a
    KaiwoJob would be, and no LocalQueue appears in C."""
    ns = new_namespace(admin)
    r = admin.post(jobs_url(ns), json=job_body("borrow", {MANAGED: "true", "kueue.x-k8s.io/queue-name": "team-only"}))
    message = refused_by_webhook(r, "mutate-jobs.kaiwo.silogen.ai")
    assert "metadata.labels[kueue.x-k8s.io/queue-name]: cluster queue team-only defines one or more namespaces" in message
    assert not exists(admin, jobs_url(ns, "borrow"))
    assert admin.get(LOCALQUEUES.format(ns=ns)).json()["items"] == []
    kj = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": "borrow"},
          "spec": {**WORKLOAD, "clusterQueue": "team-only"}}
    assert admin.post(kaiwojob_url(ns), json=kj).status_code == 201
    st = await wait_status(admin, "KaiwoJob", ns, "borrow", "ERROR", timeout=60)
    assert "WrongQueueNamespace" in str(st), st  # the same rule, reported on the KaiwoJob


def workload_body(kind: str, name: str, spec: dict) -> dict:
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


#: (kind, name, spec, field) created while no webhook runs; the reconcilers report each as ERROR naming the field
BAD_WORKLOADS = [
    ("KaiwoJob", "bad", {**WORKLOAD, "resources": {"limits": {"cpu": "-1"}}}, "spec.resources.limits.cpu"),
    ("KaiwoService", "bad", {**WORKLOAD, "resources": {"limits": {"cpu": "-1"}}}, "spec.resources.limits.cpu"),
    ("KaiwoService", "gpus", {**WORKLOAD, "gpus": 2, "replicas": 1, "gpusPerReplica": 3}, "spec.gpusPerReplica"),
    ("KaiwoJob", "entrypoint", {**WORKLOAD, "entrypoint": "x" * 131072}, "spec.entrypoint"),
]


async def test_operator_stopped_fails_open_and_reconcilers_still_report_errors(serving, plane, admin, tmp_path):
    """Runs last in this module: it stops the operator."""
    ns, enforced = new_namespace(admin), new_namespace(admin, enforce=True)
    assert admin.post(jobs_url(ns), json=job_body("adopted", {MANAGED: "true"})).status_code == 201
    await eventually(lambda: exists(admin, kaiwojob_url(ns, "adopted")), what="tracking KaiwoJob")
    assert serving.stop() == 0
    # deleted while no webhook can release the finalizer: it waits, Terminating
    delete(admin, jobs_url(ns, "adopted"))
    assert get(admin, jobs_url(ns, "adopted"))["metadata"].get("deletionTimestamp")
    r = admin.post(jobs_url(ns), json=job_body("labelled", {MANAGED: "true"}))
    assert r.status_code == 201, r.text
    assert not r.json()["metadata"].get("finalizers"), "no webhook ran, so no finalizer"
    for kind, name, spec, _field in BAD_WORKLOADS:
        r = admin.post(f"{KAIWO}/namespaces/{ns}/{kind.lower()}s", json=workload_body(kind, name, spec))
        assert r.status_code == 201, r.text
    r = admin.post(f"/apis/config.kaiwo.silogen.ai/v1alpha1/namespaces/{ns}/aimnamespaceconfigs",
                   json={"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "AIMNamespaceConfig",
                         "metadata": {"name": "aim"}, "spec": {"credentials": {"huggingFaceToken": {"secretName": "hf"}}}})
    assert r.status_code == 201, r.text
    r = admin.post(f"/apis/kubeai.org/v1/namespaces/{ns}/models",
                   json={"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "m"},
                         "spec": {"url": "hf://org/model", "engine": "VLLM", "features": ["TextGeneration"],
                                  "resourceProfile": "no-such-profile:1"}})
    assert r.status_code == 201, r.text
    r = submit(admin, "KaiwoQueueConfig", SEMANTIC[6][2])
    assert r.status_code == 200, r.text
    # enforcement is the one fail-closed webhook: an unmanaged GPU Job in an enforced namespace waits for the operator
    r = admin.post(jobs_url(enforced), json=job_body("gpu", gpu="amd.com/gpu"))
    assert r.status_code >= 500 and "failed calling webhook" in r.json()["message"], r.text
    assert admin.post(jobs_url(enforced), json=job_body("cpu")).status_code == 201

    op = start_operator(plane, tmp_path / "restarted.log")
    try:
        for kind, name, _spec, field in BAD_WORKLOADS:
            st = await wait_status(admin, kind, ns, name, "ERROR", timeout=120)
            messages = " ".join(c.get("message", "") for c in st.get("conditions") or [])
            assert f"{field}: " in messages, st

        def config_invalid():
            conds = (admin.get(f"/apis/kubeai.org/v1/namespaces/{ns}/models/m").json().get("status") or {}).get("conditions")
            return next((c for c in conds or [] if c["type"] == "ConfigValid" and c["status"] == "False"), None)

        cond = await eventually(config_invalid, timeout=120, what="Model ConfigValid=False")
        assert cond["message"].startswith("spec.resourceProfile: "), cond
        # back, the leader releases what the webhook could not
        await eventually(lambda: not exists(admin, jobs_url(ns, "adopted")), timeout=60, what="Terminating Job released")
        await eventually(lambda: not exists(admin, kaiwojob_url(ns, "adopted")), what="its KaiwoJob deleted")
    finally:
        op.stop()
