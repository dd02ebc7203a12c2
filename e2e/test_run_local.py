"""``./hack/run-local.sh``, the README's first command, as a user runs it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from support import wait_until
from support.echoserver import serve_chat

from e2e.conftest import ROOT
from support.admin import admin_http

pytestmark = pytest.mark.e2e

SCRIPT = ROOT / "hack" / "run-local.sh"


def user_env(run_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "RUN_LOCAL_", "PYTEST"))}
    env["RUN_LOCAL_DIR"] = str(run_dir)
    return env


def processes_under(path: Path) -> list[str]:
    """Command lines of live processes that mention ``path`` (our own run directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if str(path) in cmd and state != "Z":
            found.append(f"{proc.name}: {cmd[:160]}")
    return found


def test_once_reaches_samples_reconciled_and_cleans_up(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [str(SCRIPT), "--once"], cwd=ROOT, env=user_env(run_dir), capture_output=True, text=True, timeout=900
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-6000:]
    assert re.search(r"samples reconciled \(\d+s after start\)", text), text[-6000:]
    # what the operator made is printed
    for shown in ("kaiwojob.kaiwo.silogen.ai/hello-job", "job.batch/hello-job", "deployment.apps/hello-service", "clusterqueue.kueue.x-k8s.io/kaiwo"):
        assert shown in text, shown
    assert not processes_under(run_dir), processes_under(run_dir)
    assert not (run_dir / "plane" / "state.json").exists()


def call_sample_model_through_proxy(kubeconfig: Path, proxy_url: str) -> None:
    """kwok Pods serve nothing, so the test runs its own fake model server on a loopback
    address and stands a Ready server Pod of the sample Model in for it."""
    server = serve_chat("hi from fake", "127.0.0.77")
    kubectl = [str(ROOT / ".venv" / "bin" / "kubectl"), f"--kubeconfig={kubeconfig}"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "fake-qwen-server", "namespace": "kaiwo-samples",
                        "labels": {"app": "model", "model": "qwen2-500m-cpu"},
                        "annotations": {"model-pod-port": str(server.server_address[1])}},
           "spec": {"schedulerName": "e2e-nobody", "containers": [{"name": "server", "image": "fake"}]}}
    # The sample Model's own Pod runs on a kwok node, whose podIP serves nothing: take the Model
    # to 0 server Pods first, so the only endpoint is the fake server's Pod.
    subprocess.run([*kubectl, "patch", "model", "qwen2-500m-cpu", "-n", "kaiwo-samples", "--type=merge",
                    "-p", '{"spec": {"autoscalingDisabled": true, "replicas": 0}}'], check=True, capture_output=True)

    def model_pods() -> str:
        return subprocess.run([*kubectl, "get", "pods", "-n", "kaiwo-samples", "-l", "model=qwen2-500m-cpu", "-o", "name"],
                              check=True, capture_output=True, text=True).stdout.strip()

    wait_until(lambda: model_pods() == "", timeout=120, interval=1, what="the sample Model's own Pod is gone")
    try:
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(pod), text=True, check=True, capture_output=True)
        status = {"status": {"phase": "Running", "podIP": "127.0.0.77", "podIPs": [{"ip": "127.0.0.77"}],
                             "conditions": [{"type": "Ready", "status": "True"}]}}
        subprocess.run([*kubectl, "patch", "pod", "fake-qwen-server", "-n", "kaiwo-samples", "--subresource=status",
                        "--type=merge", "-p", json.dumps(status)], check=True, capture_output=True)
        # the caller run-local made (ServiceAccount model-user, bound to kaiwo-model-user): --proxy-auth kubernetes
        token = subprocess.run([*kubectl, "-n", "kaiwo-samples", "create", "token", "model-user"], check=True,
                               capture_output=True, text=True).stdout.strip()
        req = urllib.request.Request(proxy_url + "/chat/completions", method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
                                     data=b'{"model":"qwen2-500m-cpu","messages":[{"role":"user","content":"hi"}]}')
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 200 and b"hi from fake" in r.read()
    finally:
        server.shutdown()


def test_ctrl_c_tears_everything_down(tmp_path):
    """Without --once it keeps running; Ctrl-C (SIGINT to its process group) stops it all.
    --simulate: the sample KaiwoJob runs on kwok nodes (admitted by the real Kueue)."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [str(SCRIPT), "--simulate"],
        cwd=ROOT,
        env=user_env(run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()

    def wait_for_line(pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(re.search(pattern, line) for line in lines):
            if proc.poll() is not None:
                reader.join(5)
                raise AssertionError(f"run-local exited with {proc.returncode}:\n{''.join(lines)[-6000:]}")
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGTERM)
                raise AssertionError(f"no line matching {pattern!r} after {timeout:.0f}s:\n{''.join(lines)[-6000:]}")
            time.sleep(0.2)

    try:
        wait_for_line(r"samples reconciled", 900)
        wait_for_line(r'"id":"qwen2-500m-cpu"', 60)  # the printed /openai/v1/models lists the sample Model
        proxy_url = next(m.group(1) for line in lines if (m := re.search(r"OpenAI-compatible proxy: (\S+)", line)))
        call_sample_model_through_proxy(run_dir / "plane" / "kubeconfig", proxy_url)
        # the status lines follow the samples from "samples reconciled" on; the 10 s job may already be
        # COMPLETE by then on a loaded machine, so its RUNNING is not always printed
        wait_for_line(r"status: KaiwoJob hello-job COMPLETE;KaiwoService hello-service READY", 300)
        state = json.loads((run_dir / "plane" / "state.json").read_text())
        assert processes_under(run_dir)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        rc = proc.wait(120)
        reader.join(5)
    text = "".join(lines)
    assert rc == 130, text[-4000:]
    assert "stopping the local control plane" in text
    assert not processes_under(run_dir), processes_under(run_dir)
    for name, pid in state["pids"].items():
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1][:3], name


def test_with_kubeconfig_uses_that_cluster(tmp_path):
    """KUBECONFIG set: no local control plane of its own, operator CRDs applied,
    no simulated Nodes applied, and the cluster is left running afterwards."""
    from kaiwo_ctrl.local.controlplane import ControlPlane, locate_assets

    cluster = ControlPlane(tmp_path / "cluster", locate_assets(build=True)).start(install_crds=True)
    try:
        run_dir = tmp_path / "run"
        env = user_env(run_dir)
        env["KUBECONFIG"] = str(cluster.kubeconfig)
        out = subprocess.run([str(SCRIPT), "--once"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        text = out.stdout + out.stderr
        assert out.returncode == 0, text[-6000:]
        assert "samples reconciled" in text and "starting a local control plane" not in text
        assert not (run_dir / "plane").exists()
        with admin_http(cluster) as h:
            assert h.get("/api/v1/nodes").json()["items"] == [], "simulated Nodes must never reach a real cluster"
            job = h.get("/apis/kaiwo.silogen.ai/v1alpha1/namespaces/kaiwo-samples/kaiwojobs/hello-job").json()
            assert job["status"]["status"], job
        assert cluster.processes["kube-apiserver"].alive(), "the user's cluster keeps running"
        assert not processes_under(run_dir), processes_under(run_dir)
    finally:
        cluster.stop()
