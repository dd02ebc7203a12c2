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
    """`local up --simulate` alone: a Job's Pod is scheduled by kaiwo-scheduler onto a kwok Node and completes."""
    import yaml

    d = tmp_path / "sim"
    up = subprocess.run([sys.executable, "-m", "kaiwo_ctrl", "local", "up", "--simulate", "--dir", str(d)],
                        capture_output=True, text=True, timeout=300)
    kubectl = [str(VENV_BIN / "kubectl"), "--kubeconfig", str(d / "kubeconfig")]
    try:
        assert up.returncode == 0, up.stderr
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "sim-0", "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": {"type": "kwok"}},
            "status": {"capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
        }
        job = {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hello", "namespace": "default"},
            "spec": {"template": {"spec": {
                "schedulerName": "kaiwo-scheduler", "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
            }}},
        }
        for doc in (node, job):
            subprocess.run(kubectl + ["apply", "-f", "-"], input=yaml.safe_dump(doc), text=True, check=True, capture_output=True)
        def succeeded() -> bool:
            out = subprocess.run(kubectl + ["get", "job", "hello", "-o", "json"], capture_output=True, text=True, check=True).stdout
            return json.loads(out).get("status", {}).get("succeeded") == 1

        wait_until(succeeded, timeout=120, interval=1, what=f"job completed (logs in {d}/logs)")
        pods = json.loads(subprocess.run(kubectl + ["get", "pods", "-o", "json"], capture_output=True, text=True, check=True).stdout)
        assert [p["spec"]["nodeName"] for p in pods["items"]] == ["sim-0"]
    finally:
        subprocess.run([sys.executable, "-m", "kaiwo_ctrl", "local", "down", "--dir", str(d)], capture_output=True, timeout=120)
