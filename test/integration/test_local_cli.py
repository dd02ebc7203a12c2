"""`kaiwo-ctrl local up/down` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import wait_until

pytestmark = pytest.mark.integration

VENV_BIN = Path(sys.executable).parent


def test_local_up_lists_every_crd_group_and_down_cleans_up(tmp_path):
    d = tmp_path / "kc"
    up = subprocess.run([sys.executable, "-m", "kaiwo_ctrl", "local", "up", "--dir", str(d)], capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stderr
        assert f"kubeconfig: {d}/kubeconfig" in up.stdout
        pids = json.loads((d / "state.json").read_text())["pids"]
        assert set(pids) == {"etcd", "kube-apiserver"}
        out = subprocess.run(
            [str(VENV_BIN / "kubectl"), "--kubeconfig", str(d / "kubeconfig"), "get", "crd", "-o", "name"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        groups = {line.split("/", 1)[1].split(".", 1)[1] for line in out.split()}
        for g in ("kaiwo.silogen.ai", "config.kaiwo.silogen.ai", "kubeai.org", "kueue.x-k8s.io", "ray.io",
                  "workload.codeflare.dev", "gateway.networking.k8s.io"):
            assert g in groups, (g, groups)
        # a second `up` on the same directory refuses instead of clobbering it
        again = subprocess.run([sys.executable, "-m", "kaiwo_ctrl", "local", "up", "--dir", str(d)], capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "already recorded" in again.stderr
    finally:
        down = subprocess.run([sys.executable, "-m", "kaiwo_ctrl", "local", "down", "--dir", str(d)], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0 and "kube-apiserver" in down.stdout
    assert not d.exists()
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


def test_local_up_simulate_runs_a_job_to_completion(tmp_path):
    """`local up --simulate` alone: Kueue runs with its webhooks on loopback. A Job
    in a LocalQueue is suspended by Kueue's webhook, admitted by Kueue, then
    scheduled by kaiwo-scheduler onto a kwok Node where it completes. A Job without
    a queue is not Kueue's and runs at once."""
    import yaml

    d = tmp_path / "sim"
    target = _http_target()
    up = subprocess.run([sys.executable, "-m", "kaiwo_ctrl", "local", "up", "--simulate", "--dir", str(d),
                         "--sim-forward", f"8080:{target.server_address[1]}"],
                        capture_output=True, text=True, timeout=600)
    kubectl = [str(VENV_BIN / "kubectl"), "--kubeconfig", str(d / "kubeconfig")]

    def get(*args: str) -> dict:
        return json.loads(subprocess.run(kubectl + ["get", *args, "-o", "json"], capture_output=True, text=True, check=True).stdout)

    try:
        assert up.returncode == 0, up.stderr
        assert set(json.loads((d / "state.json").read_text())["pids"]) == {
            "etcd", "kube-apiserver", "controller-manager", "scheduler", "kwok", "kueue", "kuberay", "appwrapper", "ray-dashboard"}
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "sim-0", "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": {"type": "kwok"}},
            "status": {"capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
        }
        kueue = [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
             "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
                 {"name": "default", "resources": [{"name": "cpu", "nominalQuota": 4}, {"name": "memory", "nominalQuota": "8Gi"}]}]}]}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": "default"},
             "spec": {"clusterQueue": "cq"}},
        ]

        def job(name: str, labels: dict) -> dict:
            return {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default", "labels": labels},
                "spec": {"template": {"spec": {
                    "schedulerName": "kaiwo-scheduler", "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"],
                                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                }}},
            }

        for doc in (node, *kueue, job("plain", {}), job("queued", {"kueue.x-k8s.io/queue-name": "lq"})):
            subprocess.run(kubectl + ["apply", "--server-side", "-f", "-"], input=yaml.safe_dump(doc), text=True, check=True,
                           capture_output=True)
        wait_until(lambda: all(get("job", n).get("status", {}).get("succeeded") == 1 for n in ("plain", "queued")),
                   timeout=180, interval=1, what=f"both jobs completed (logs in {d}/logs)")
        pods = get("pods")["items"]
        assert sorted(p["spec"]["nodeName"] for p in pods) == ["sim-0", "sim-0"]
        workloads = get("workloads.kueue.x-k8s.io")["items"]
        assert [w["metadata"]["ownerReferences"][0]["name"] for w in workloads] == ["queued"], "Kueue manages only the queued Job"
        conds = {c["type"]: c["status"] for c in workloads[0]["status"]["conditions"]}
        assert conds.get("Admitted") == "True" and conds.get("Finished") == "True", conds
        assert workloads[0]["status"]["admission"]["clusterQueue"] == "cq"
        _streams_through_kwok(kubectl, get, d)
    finally:
        target.shutdown()
        subprocess.run([sys.executable, "-m", "kaiwo_ctrl", "local", "down", "--dir", str(d)], capture_output=True, timeout=120)


def _http_target():
    """The port-forward target: a local HTTP server answering GET with its path."""
    from support.echoserver import serve_echo

    return serve_echo("target")


def _streams_through_kwok(kubectl: list[str], get, d: Path) -> None:
    """kubectl (not our CLI) logs, exec and port-forward into a simulated pod: the API server reaches kwok."""
    import urllib.request

    import yaml

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"nodeName": "sim-0", "containers": [{"name": "c", "image": "busybox"}]}}
    subprocess.run(kubectl + ["apply", "-f", "-"], input=yaml.safe_dump(pod), text=True, check=True, capture_output=True)
    wait_until(lambda: get("pod", "web").get("status", {}).get("phase") == "Running", timeout=60, interval=0.5,
               what="the pod runs")
    # kwok gives simulated Pods loopback addresses, so a connection to one never leaves the machine
    import ipaddress

    from kaiwo_ctrl.local.components import POD_CIDR

    assert ipaddress.ip_address(get("pod", "web")["status"]["podIP"]) in ipaddress.ip_network(POD_CIDR)
    logs = subprocess.run(kubectl + ["logs", "web"], capture_output=True, text=True, timeout=60)
    assert logs.returncode == 0 and "simulated container on a kwok node" in logs.stdout, logs.stderr
    ex = subprocess.run(kubectl + ["exec", "web", "--", "sh", "-c", "echo in-pod; exit 3"], capture_output=True,
                        text=True, timeout=60)
    # kwok reports the command's exit as an internal error ("...: exit status 3"), which kubectl
    # does not turn into its exit code (kaiwo exec does; see kaiwo_cli.channels.exit_code)
    assert ex.stdout == "in-pod\n" and ex.returncode != 0 and "exit status 3" in ex.stderr, ex.stderr
    pf = subprocess.Popen(kubectl + ["port-forward", "pod/web", ":8080"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    try:
        line = pf.stdout.readline()
        assert line.startswith("Forwarding from 127.0.0.1:"), (line, pf.stderr.read() if pf.poll() is not None else "")
        port = int(line.split("127.0.0.1:", 1)[1].split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/through-the-tunnel", timeout=30) as r:
            assert r.read() == b"target saw /through-the-tunnel"
    finally:
        pf.terminate()
        pf.wait(30)
