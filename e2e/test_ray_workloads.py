"""Ray workloads end to end on the simulated cluster: the real Kueue, KubeRay and
AppWrapper controllers, and the simulated Ray dashboard
(kaiwo_ctrl.local.raydashboard) answering KubeRay as a Ray head would.

A Ray job "runs" as long as KubeRay's submitter Pod does (kwok completes it
after ``E2E_POD_RUN_MS``); its head and worker Pods are KubeRay's own, made
from the RayCluster spec the operator writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from e2e.conftest import condition, get, wait_for
from e2e.test_kueue_admission import sample_queues
from kaiwo_ctrl.local.raydashboard import FAIL_ANNOTATION

pytestmark = pytest.mark.e2e

NS = "ray-e2e"
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
GPU = "amd.com/gpu"
TERMINAL = ("COMPLETE", "FAILED", "TERMINATED", "ERROR")
ORDER = ["PENDING", "STARTING", "RUNNING", "COMPLETE"]


@pytest.fixture(scope="module")
def ray_ns(operator, kubectl, admin):
    sample_queues(admin, kubectl)  # 16 GPUs, static: the preemption tests count on both
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    return admin


def create_job(admin, prefix: str, annotations: dict | None = None, **spec) -> dict:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    body = {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoJob",
        "metadata": {"name": name, "namespace": NS, "labels": {"e2e-team": "ray"}, "annotations": annotations or {}},
        "spec": {"user": "e2e@example.com", "image": "rayproject/ray:2.40.0", "gpus": 2, "ray": True,
                 "entrypoint": "python -c 'print(1)'", "env": [{"name": "E2E_RAY_ENV", "value": "from-kaiwo"}], **spec},
    }
    r = admin.post(f"{KAIWO}/namespaces/{NS}/kaiwojobs", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def watch_statuses(admin, created: dict, timeout: float, on_status=None) -> list[str]:
    """Every status.status the KaiwoJob takes from its creation on (a watch sees every write), until terminal."""
    name, rv = created["metadata"]["name"], created["metadata"]["resourceVersion"]
    seen: list[str] = []
    params = {"watch": "1", "resourceVersion": rv, "fieldSelector": f"metadata.name={name}", "timeoutSeconds": str(int(timeout))}
    with admin.stream("GET", f"{KAIWO}/namespaces/{NS}/kaiwojobs", params=params, timeout=httpx.Timeout(30, read=timeout + 10)) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            ev = json.loads(line)
            st = ((ev["object"].get("status") or {}).get("status")) or ""
            if st and (not seen or seen[-1] != st):
                seen.append(st)
                if on_status:
                    on_status(st)
            if st in TERMINAL:
                return seen
    raise AssertionError(f"KaiwoJob {name} not finished within {timeout:.0f}s; statuses {seen}")


def ray_pods(admin, cluster_prefix: str) -> dict[str, list[dict]]:
    pods = get(admin, f"/api/v1/namespaces/{NS}/pods?labelSelector=ray.io/node-type")["items"]
    out: dict[str, list[dict]] = {"head": [], "worker": []}
    for p in pods:
        if p["metadata"]["labels"].get("ray.io/cluster", "").startswith(cluster_prefix):
            out[p["metadata"]["labels"]["ray.io/node-type"]].append(p)
    return out


def ray_container(p: dict) -> dict:
    return p["spec"]["containers"][0]


def test_ray_job_runs_pending_to_complete_on_kuberay_pods(ray_ns):
    admin = ray_ns
    created = create_job(admin, "rayrun")
    name = created["metadata"]["name"]
    at_running: dict = {}

    def snapshot(st: str) -> None:
        if st == "RUNNING" and not at_running:
            at_running["pods"] = ray_pods(admin, name)
            items = get(admin, f"{KUEUE}/namespaces/{NS}/workloads")["items"]
            at_running["workload"] = next((w for w in items if w["metadata"]["name"].startswith(f"rayjob-{name}-")), None)

    seen = watch_statuses(admin, created, 240, snapshot)
    assert seen[-1] == "COMPLETE", seen
    # in order, none skipped back; STARTING and RUNNING both observed (PENDING is written
    # only when Kueue has not admitted by the operator's first status write)
    assert seen == [s for s in ORDER if s in seen] and {"STARTING", "RUNNING"} <= set(seen), seen

    pods = at_running["pods"]
    assert len(pods["head"]) == 1 and len(pods["worker"]) >= 1, pods
    for role, plist in pods.items():
        for p in plist:
            owner = p["metadata"]["ownerReferences"][0]
            assert owner["kind"] == "RayCluster", owner  # made by KubeRay, not by the operator
            labels = p["metadata"]["labels"]
            assert labels.get("e2e-team") == "ray" and labels.get("kaiwo.silogen.ai/name") == name, labels
            env = {e["name"]: e.get("value") for e in ray_container(p).get("env") or []}
            assert env.get("E2E_RAY_ENV") == "from-kaiwo", (role, env)
    gpus = sum(int((ray_container(p).get("resources") or {}).get("limits", {}).get(GPU, 0)) for p in pods["worker"])
    assert gpus == 2, [ray_container(p).get("resources") for p in pods["worker"]]
    # Kueue saw the RayJob's pods ready
    wl = at_running["workload"]
    assert wl is not None
    wait_for(lambda: condition(get(admin, f"{KUEUE}/namespaces/{NS}/workloads/{wl['metadata']['name']}"), "PodsReady").get("status") == "True",
             60, "Kueue's PodsReady on the RayJob's Workload")
    # KubeRay marks the deployment Complete once its submitter Job has finished too
    done = wait_for(lambda: (r := get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/{name}")) and
                    r["status"].get("jobDeploymentStatus") in ("Complete", "Failed") and r, 60, "KubeRay to finish the RayJob")
    assert done["status"]["jobStatus"] == "SUCCEEDED" and done["status"]["jobDeploymentStatus"] == "Complete", done["status"]


def test_failing_ray_job_ends_failed(ray_ns):
    admin = ray_ns
    created = create_job(admin, "rayfail", annotations={FAIL_ANNOTATION: "fail"})
    seen = watch_statuses(admin, created, 240)
    assert seen[-1] == "FAILED" and "RUNNING" in seen, seen
    name = created["metadata"]["name"]
    done = wait_for(lambda: (r := get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/{name}")) and
                    r["status"].get("jobDeploymentStatus") in ("Complete", "Failed") and r, 60, "KubeRay to finish the RayJob")
    assert done["status"]["jobStatus"] == "FAILED" and done["status"]["jobDeploymentStatus"] == "Failed", done["status"]
    assert done["status"]["reason"] == "AppFailed", done["status"]


# --------------------------------------------------------------------------- KaiwoConfig ray.headPodMemory

KAIWO_CONFIG = "/apis/config.kaiwo.silogen.ai/v1alpha1/kaiwoconfigs/kaiwo"


def kaiwo_cli(sim_plane, tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "kaiwo").mkdir(parents=True)
    (home / ".config" / "kaiwo" / "kaiwoconfig.yaml").write_text(f"user: e2e@example.com\nnamespace: {NS}\n")
    env = {k: v for k, v in os.environ.items() if k != "KAIWOCONFIG"}
    env.update({"HOME": str(home), "NO_COLOR": "1", "KUBECONFIG": str(sim_plane.kubeconfig)})

    def kaiwo(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(Path(sys.executable).parent / "kaiwo"), *args], capture_output=True, text=True, env=env, timeout=120)

    return kaiwo


def test_head_pod_memory_reaches_the_kuberay_head_pod_and_logs_exec_work_on_it(ray_ns, sim_plane, tmp_path):
    """KaiwoConfig's ray.headPodMemory on the head Pod KubeRay made; then `kaiwo logs` and
    `kaiwo exec` on that head Pod (as kwok serves them: kaiwo_ctrl.local.kwokstreams)."""
    admin = ray_ns
    before = (get(admin, KAIWO_CONFIG)["spec"].get("ray") or {}).get("headPodMemory")
    patch = {"spec": {"ray": {"headPodMemory": "3Gi"}}}
    r = admin.patch(KAIWO_CONFIG, json=patch, headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    try:
        name = ""

        def head_pod():
            nonlocal name
            if not name:
                name = create_job(admin, "rayheadmem")["metadata"]["name"]
            heads = ray_pods(admin, name)["head"]
            return heads and heads[0]

        head = wait_for(head_pod, 120, "KubeRay's head Pod")
        res = ray_container(head)["resources"]
        assert res["requests"]["memory"] == "3Gi" and res["limits"]["memory"] == "3Gi", res
        kaiwo = kaiwo_cli(sim_plane, tmp_path)
        pod = head["metadata"]["name"]
        wait_for(lambda: (get(admin, f"/api/v1/namespaces/{NS}/pods/{pod}") or {}).get("status", {}).get("phase") == "Running",
                 60, "the head Pod to run")
        r = kaiwo("logs", name, "--pod", pod)
        assert r.returncode == 0 and "simulated container on a kwok node" in r.stdout, (r.stdout, r.stderr)
        r = kaiwo("exec", name, "--pod", pod, "--", "sh", "-c", "echo from-the-ray-head; exit 4")
        assert (r.returncode, r.stdout) == (4, "from-the-ray-head\n"), r.stderr
    finally:
        restore = {"spec": {"ray": {"headPodMemory": before}}}
        admin.patch(KAIWO_CONFIG, json=restore, headers={"Content-Type": "application/merge-patch+json"})
        if name:
            admin.delete(f"{KAIWO}/namespaces/{NS}/kaiwojobs/{name}")
