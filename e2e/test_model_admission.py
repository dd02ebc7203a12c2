"""KubeAI Models sharing the GPU quota with KaiwoJobs, admitted by the real Kueue.

Two teams' ClusterQueues (team-a and team-b, 4 GPUs each, in-queue preemption
by priority) on the simulated cluster. A Model under team A asks 2 GPUs per
replica; a team-A KaiwoJob takes 2 GPUs for ``E2E_POD_RUN_MS``. The tests build
on each other in file order: quota and waiting, then preemption, then a Model
outside Kueue, then InferencePools.

kwok Pods serve nothing, so the admitted replica's Pod is pointed at a fake
model server on a loopback address (its ``podIP`` and ``model-pod-port``) to
show the proxy serving through the admitted replica while another waits.
"""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from support.echoserver import serve_chat
from support.tokens import bearer, grant_model_user, service_account_token

from e2e.conftest import forbidden_lines, get, wait_for
from e2e.test_kueue_admission import GPU, KAIWO, KAIWO_CONFIG, KUEUE, QUEUE_CONFIG, condition

pytestmark = pytest.mark.e2e

NS = "models-e2e"
MODELS = f"/apis/kubeai.org/v1/namespaces/{NS}/models"
POOLS = f"/apis/inference.networking.k8s.io/v1/namespaces/{NS}/inferencepools"
FLAVOR = "amd-mi300x-8gpu-57core-460gi"
LOW, HIGH = "e2e-serving-low", "e2e-training-high"
FIGURES: dict[str, float] = {}


def team_queue(name: str, gpus: int) -> dict:
    return {
        "name": name,
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory", GPU],
                "flavors": [{"name": FLAVOR, "resources": [
                    {"name": "cpu", "nominalQuota": 64}, {"name": "memory", "nominalQuota": "512Gi"},
                    {"name": GPU, "nominalQuota": gpus}]}],
            }],
        },
    }


@pytest.fixture(scope="module")
def teams(operator, kubectl, admin):
    """The queue config gains team-a and team-b (4 GPUs each) and two priorities."""
    from e2e.conftest import ROOT

    sample = str(ROOT / "config" / "samples" / "kaiwo_v1alpha1_kaiwoqueueconfig.yaml")
    # the operator creates its default queue config at start-up: an apply racing it gets AlreadyExists once
    wait_for(lambda: kubectl("apply", "-f", sample, check=False).returncode == 0, 60, "the sample queue config applied")
    def add_teams() -> bool:
        """GET and PUT until the write lands (the operator writes the queue config too)."""
        qc = get(admin, QUEUE_CONFIG)
        if qc is None:
            return False
        qc["spec"]["clusterQueues"] = [c for c in qc["spec"]["clusterQueues"] if c["name"] not in ("team-a", "team-b")]
        qc["spec"]["clusterQueues"] += [team_queue("team-a", 4), team_queue("team-b", 4)]
        pcs = [p for p in qc["spec"].get("workloadPriorityClasses") or [] if p["metadata"]["name"] not in (LOW, HIGH)]
        qc["spec"]["workloadPriorityClasses"] = pcs + [
            {"metadata": {"name": LOW}, "value": 10, "description": "serving that may wait"},
            {"metadata": {"name": HIGH}, "value": 1000, "description": "urgent training"},
        ]
        r = admin.put(QUEUE_CONFIG, json=qc)
        assert r.status_code in (200, 409), r.text
        return r.status_code == 200

    wait_for(add_teams, 60, "the queue config with team-a and team-b")
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    for cq in ("team-a", "team-b"):
        wait_for(lambda cq=cq: get(admin, f"{KUEUE}/clusterqueues/{cq}"), 60, f"ClusterQueue {cq}")
    for pc in (LOW, HIGH):
        wait_for(lambda pc=pc: get(admin, f"{KUEUE}/workloadpriorityclasses/{pc}"), 60, f"WorkloadPriorityClass {pc}")
    return admin


def create_model(admin, name: str, labels: dict, replicas: int = 1, profile: str = "amd-gpu-mi300x:2") -> None:
    body = {
        "apiVersion": "kubeai.org/v1", "kind": "Model",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"url": "hf://org/model", "engine": "VLLM", "features": ["TextGeneration"], "resourceProfile": profile,
                 "autoscalingDisabled": True, "replicas": replicas},
    }
    r = admin.post(MODELS, json=body)
    assert r.status_code == 201, r.text


def scale(admin, name: str, replicas: int) -> None:
    """What the autoscaler does: the scale subresource (the autoscaler itself is off for
    these Models, so nothing but the test changes their replicas)."""
    r = admin.patch(f"{MODELS}/{name}/scale", json={"spec": {"replicas": replicas}},
                    headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text


def model_pods(admin, name: str) -> list[dict]:
    return [p for p in get(admin, f"/api/v1/namespaces/{NS}/pods?labelSelector=model%3D{name}")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def gated(pod: dict) -> bool:
    return any(g["name"] == "kueue.x-k8s.io/admission" for g in pod["spec"].get("schedulingGates") or ())


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions") or ())


def model(admin, name: str) -> dict:
    return get(admin, f"{MODELS}/{name}") or {}


def submit_job(admin, prefix: str, queue: str, gpus: int = 2, priority: str = "") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    spec = {"user": "e2e@example.com", "image": "busybox:1.36", "gpus": gpus, "entrypoint": "sleep 1", "clusterQueue": queue}
    if priority:
        spec["priorityClass"] = priority
    r = admin.post(f"{KAIWO}/namespaces/{NS}/kaiwojobs",
                   json={"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": name, "namespace": NS}, "spec": spec})
    assert r.status_code == 201, r.text
    return name


def job_status(admin, name: str) -> str:
    return ((get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/{name}") or {}).get("status") or {}).get("status") or ""


def events(admin, name: str) -> list[dict]:
    return [e for e in get(admin, f"/api/v1/namespaces/{NS}/events")["items"]
            if e["involvedObject"].get("kind") == "Model" and e["involvedObject"]["name"] == name]


class FakeServer:
    """A fake model server (:func:`support.echoserver.serve_chat`) on ``host``."""

    def __init__(self, host: str) -> None:
        self.server = serve_chat("admitted replica", host)
        self.host, self.port = host, self.server.server_address[1]

    def stand_in(self, admin, pod: dict) -> None:
        """Point the Ready, admitted Pod at this server (kwok gives it an IP that serves nothing)."""
        path = f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}"
        r = admin.patch(path, json={"metadata": {"annotations": {"model-pod-port": str(self.port)}}},
                        headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
        r = admin.patch(f"{path}/status", json={"status": {"podIP": self.host, "podIPs": [{"ip": self.host}]}},
                        headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text


def proxy_url(proxy) -> str:
    """The proxy's in-cluster listener (the proxy Deployment's command as a local process: the operator serves none)."""
    return f"http://127.0.0.1:{proxy.ports['http']}/openai/v1"


def test_replicas_past_quota_wait_with_kueues_message_and_admitted_ones_serve(teams, proxy):
    admin = teams
    create_model(admin, "chat-a", {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": LOW})
    first = wait_for(lambda: [p for p in model_pods(admin, "chat-a") if ready(p) and not gated(p)], 120, "the first replica admitted and Ready")[0]
    assert first["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert first["metadata"]["labels"].get("kueue.x-k8s.io/managed") == "true", "Kueue's pod webhook took the Pod"
    assert get(admin, f"{KUEUE}/namespaces/{NS}/localqueues/team-a"), "the LocalQueue was made for the Model"
    wait_for(lambda: condition(model(admin, "chat-a"), "QuotaReserved").get("status") == "True", 60, "QuotaReserved=True")

    # a higher priority than the Model's, or the Model's new replica would preempt it
    t_job = time.monotonic()
    job = submit_job(admin, "team-a-train", "team-a", priority=HIGH)
    wait_for(lambda: job_status(admin, job) in ("STARTING", "RUNNING"), 90, "the team-A KaiwoJob admitted")
    FIGURES["peer_kaiwojob_submit_to_started_s"] = time.monotonic() - t_job
    t0 = time.monotonic()
    scale(admin, "chat-a", 2)

    def waiting():
        # first "waiting for Kueue to create the Workload", then Kueue's own verdict
        cond = condition(model(admin, "chat-a"), "QuotaReserved")
        return cond.get("status") == "False" and GPU in cond.get("message", "") and cond
    cond = wait_for(waiting, 60, "QuotaReserved=False on the Model with Kueue's message")
    t_verdict = time.monotonic()
    assert cond["reason"] == "Pending", cond
    pods = model_pods(admin, "chat-a")
    assert len(pods) == 2 and sum(gated(p) for p in pods) == 1, [p["spec"].get("schedulingGates") for p in pods]
    st = model(admin, "chat-a")["status"]
    assert st["replicas"]["ready"] == 1, st
    assert any(e["reason"] == "QuotaPending" for e in events(admin, "chat-a"))

    fake = FakeServer("127.0.0.78")
    try:
        fake.stand_in(admin, first)
        # a caller the proxy knows (--proxy-auth kubernetes): a ServiceAccount bound to kaiwo-model-user
        token = service_account_token(admin, NS, "chat-caller")
        grant_model_user(admin, NS, NS, "chat-caller", binding="chat-callers")
        chat = {"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]}
        wait_for(lambda: httpx.post(f"{proxy_url(proxy)}/chat/completions", timeout=60, json=chat,
                                    headers=bearer(token)).status_code != 404, 60, "the RoleBinding honoured")
        for _ in range(3):
            r = httpx.post(f"{proxy_url(proxy)}/chat/completions", timeout=60, json=chat, headers=bearer(token))
            assert r.status_code == 200 and "admitted replica" in r.text, r.text
    finally:
        fake.server.shutdown()

    wait_for(lambda: job_status(admin, job) == "COMPLETE", 180, "the team-A KaiwoJob COMPLETE")
    t_done = time.monotonic()
    wait_for(lambda: all(not gated(p) for p in model_pods(admin, "chat-a")), 60, "the waiting replica admitted")
    t_admit = time.monotonic()
    wait_for(lambda: (model(admin, "chat-a").get("status") or {}).get("replicas", {}).get("ready") == 2, 60, "both replicas Ready")
    t_ready = time.monotonic()
    assert condition(model(admin, "chat-a"), "QuotaReserved").get("status") == "True"
    FIGURES.update(scale_to_quota_verdict_s=t_verdict - t0, contended_wait_s=t_done - t0, job_done_to_admitted_s=t_admit - t_done, job_done_to_ready_s=t_ready - t_done)


def test_uncontended_scale_up_is_admitted_at_once(teams):
    """The floor: scale-up to admission and to a Ready replica when quota is free (team B)."""
    admin = teams
    create_model(admin, "chat-b", {"kueue.x-k8s.io/queue-name": "team-b"}, replicas=0)
    wait_for(lambda: (model(admin, "chat-b").get("status") or {}).get("replicas") is not None, 60, "chat-b reconciled")
    t0 = time.monotonic()
    scale(admin, "chat-b", 1)
    wait_for(lambda: [p for p in model_pods(admin, "chat-b") if not gated(p)], 60, "chat-b's replica admitted")
    t_admit = time.monotonic()
    wait_for(lambda: (model(admin, "chat-b").get("status") or {}).get("replicas", {}).get("ready") == 1, 60, "chat-b Ready")
    FIGURES.update(free_scale_to_admitted_s=t_admit - t0, free_scale_to_ready_s=time.monotonic() - t0)
    print("\nFIGURES", json.dumps({k: round(v, 2) for k, v in FIGURES.items()}))


def test_gpu_model_naming_no_queue_goes_through_the_default_queue(teams):
    """Where a KaiwoQueueConfig exists, a GPU Model naming no queue is admitted by the real
    Kueue under the default ClusterQueue, and runs only once the operator lifted its own gate."""
    admin = teams
    create_model(admin, "gpu-default", {})
    pod = wait_for(lambda: [p for p in model_pods(admin, "gpu-default") if ready(p)], 120, "the GPU Model's replica Ready")[0]
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "kaiwo"
    assert pod["metadata"]["labels"].get("kueue.x-k8s.io/managed") == "true", "Kueue's pod webhook took the Pod"
    assert not pod["spec"].get("schedulingGates"), "both gates lifted: Kueue's and the operator's"
    assert any(e["reason"] == "PodAdmitted" for e in events(admin, "gpu-default"))
    wait_for(lambda: condition(model(admin, "gpu-default"), "QuotaReserved").get("status") == "True", 60, "QuotaReserved=True")
    scale(admin, "gpu-default", 0)
    wait_for(lambda: not model_pods(admin, "gpu-default"), 90, "gpu-default at 0 Pods (its GPUs back)")


def test_high_priority_job_preempts_a_model_replica_which_returns(teams):
    admin = teams
    before = {p["metadata"]["name"] for p in model_pods(admin, "chat-a")}
    assert len(before) == 2
    job = submit_job(admin, "urgent", "team-a", priority=HIGH)
    victim = wait_for(lambda: [n for n in before if n not in {p["metadata"]["name"] for p in model_pods(admin, "chat-a")}],
                      120, "Kueue to preempt a low-priority Model replica")[0]
    vpod = get(admin, f"/api/v1/namespaces/{NS}/pods/{victim}")
    assert vpod is None or vpod["metadata"].get("deletionTimestamp"), "the preempted Pod is going (no longer an endpoint)"
    wait_for(lambda: any(e["reason"] == "Preempted" for e in events(admin, "chat-a")), 60, "a Preempted event on the Model")
    wait_for(lambda: condition(model(admin, "chat-a"), "QuotaReserved").get("status") == "False", 60, "the replacement waits")
    assert (model(admin, "chat-a")["status"]["replicas"]["ready"]) == 1
    wait_for(lambda: job_status(admin, job) == "COMPLETE", 180, "the high-priority KaiwoJob COMPLETE")
    wait_for(lambda: (model(admin, "chat-a").get("status") or {}).get("replicas", {}).get("ready") == 2, 90, "the replica back")
    assert condition(model(admin, "chat-a"), "QuotaReserved").get("status") == "True"


def test_rollout_under_full_quota_completes(teams):
    """Team A's quota is exactly the Model's two replicas: the surge Pod can only be
    admitted once an old Pod gives its quota back, so the rollout makes room one at a time."""
    admin = teams
    old = {p["metadata"]["name"] for p in model_pods(admin, "chat-a")}
    assert len(old) == 2
    r = admin.patch(f"{MODELS}/chat-a", json={"spec": {"env": {"ROLLOUT": "1"}}},
                    headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text

    def rolled():
        pods = model_pods(admin, "chat-a")
        return len(pods) == 2 and not old & {p["metadata"]["name"] for p in pods} and all(ready(p) and not gated(p) for p in pods)
    wait_for(rolled, 180, "both replicas replaced within team A's quota")
    wait_for(lambda: condition(model(admin, "chat-a"), "QuotaReserved").get("status") == "True", 60, "QuotaReserved=True")


def test_high_priority_model_preempts_a_low_priority_job(teams):
    """The other way round: a Model replica of higher priority takes the quota of a running KaiwoJob."""
    admin = teams
    scale(admin, "chat-b", 0)
    wait_for(lambda: not model_pods(admin, "chat-b"), 90, "chat-b at 0 Pods")
    create_model(admin, "urgent-b", {"kueue.x-k8s.io/queue-name": "team-b", "kueue.x-k8s.io/priority-class": HIGH}, replicas=0)
    job = submit_job(admin, "team-b-low", "team-b", gpus=4, priority=LOW)
    wait_for(lambda: job_status(admin, job) in ("STARTING", "RUNNING"), 90, "the low-priority team-B KaiwoJob admitted")
    scale(admin, "urgent-b", 1)
    wait_for(lambda: (model(admin, "urgent-b").get("status") or {}).get("replicas", {}).get("ready") == 1, 90,
             "the high-priority Model replica admitted and Ready")

    def job_preempted():
        wls = [w for w in get(admin, f"{KUEUE}/namespaces/{NS}/workloads")["items"] if w["metadata"]["name"].startswith(f"job-{job}-")]
        ev = condition(wls[0], "Evicted") if wls else {}
        return ev.get("status") == "True" and ev
    assert wait_for(job_preempted, 60, "Kueue to evict the KaiwoJob's Workload")["reason"] == "Preempted"
    wait_for(lambda: job_status(admin, job) == "PENDING", 90, "the preempted KaiwoJob PENDING")
    scale(admin, "urgent-b", 0)
    wait_for(lambda: job_status(admin, job) == "COMPLETE", 240, "the preempted KaiwoJob runs again and completes")


def test_model_without_queue_runs_outside_kueue(teams):
    admin = teams
    create_model(admin, "plain", {}, profile="cpu:1")
    pod = wait_for(lambda: [p for p in model_pods(admin, "plain") if ready(p)], 120, "the plain Model's Pod Ready")[0]
    assert "kueue.x-k8s.io/queue-name" not in pod["metadata"]["labels"] and not gated(pod)
    m = wait_for(lambda: (m := model(admin, "plain")) and condition(m, "Ready").get("status") == "True" and m, 60, "plain Ready")
    assert not condition(m, "QuotaReserved")


def test_inference_pool_follows_the_model(teams):
    admin = teams
    cfg = get(admin, KAIWO_CONFIG)
    cfg["spec"].setdefault("models", {})["inferencePools"] = True
    assert admin.put(KAIWO_CONFIG, json=cfg).status_code == 200
    try:
        pool = wait_for(lambda: get(admin, f"{POOLS}/plain"), 60, "the InferencePool of Model plain")
        assert pool["spec"]["selector"]["matchLabels"] == {"app": "model", "model": "plain"}
        assert pool["spec"]["targetPorts"] == [{"number": 8000}]
        assert pool["metadata"]["ownerReferences"][0]["name"] == "plain"
        r = admin.patch(f"{POOLS}/plain", json={"spec": {"targetPorts": [{"number": 9999}]}},
                        headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
        wait_for(lambda: get(admin, f"{POOLS}/plain")["spec"]["targetPorts"] == [{"number": 8000}], 60, "a hand edit of the pool repaired")
        r = admin.patch(f"{MODELS}/plain", json={"metadata": {"annotations": {"kaiwo.silogen.ai/endpoint-picker": "shared-epp:9100"}}},
                        headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
        wait_for(lambda: get(admin, f"{POOLS}/plain")["spec"]["endpointPickerRef"]["name"] == "shared-epp", 60, "the pool follows the Model")
        assert get(admin, f"{POOLS}/plain")["spec"]["endpointPickerRef"]["port"] == {"number": 9100}
        assert admin.delete(f"{MODELS}/plain").status_code == 200
        wait_for(lambda: get(admin, f"{POOLS}/plain") is None, 90, "the pool deleted with its Model")
    finally:
        cfg = get(admin, KAIWO_CONFIG)
        cfg["spec"]["models"]["inferencePools"] = False
        admin.put(KAIWO_CONFIG, json=cfg)
    wait_for(lambda: get(admin, f"{POOLS}/chat-a") is None, 60, "pools removed when the key is off")


def test_no_forbidden_in_operator_log(operator):
    """The Model controller's new reads and writes (Workloads, LocalQueues, InferencePools) are all granted."""
    assert not forbidden_lines(operator.text())
