"""Fixtures and helpers for the Model controller tests (real kube-apiserver).

No kubelet runs: tests mark server Pods Ready (or Failed) through
``pods/status`` and complete loader Jobs through ``jobs/status``.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.serving.model import controller as serving
from kaiwo_ctrl.serving.model.config import ConfigSource
from support import eventually

MERGE = {"Content-Type": "application/merge-patch+json"}
TEST_CONFIG = {
    "resourceProfiles": {
        "small": {"imageName": "cpu", "requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"},
                  "nodeSelector": {"pool": "cpu"}},
    },
    "cacheProfiles": {"fast": {"sharedFilesystem": {"storageClassName": "standard"}}},
    "modelLoading": {"image": "registry.test/kaiwo-ctrl:test"},
    "modelRollouts": {"surge": 0},
    "secretNames": {"huggingface": "hf-secret"},
}


def models_url(ns: str, name: str = "") -> str:
    return f"/apis/kubeai.org/v1/namespaces/{ns}/models" + (f"/{name}" if name else "")


@contextlib.asynccontextmanager
async def serving_manager(control_plane, path: Path, also=None):
    """A Manager running the Model controller on the config file at ``path`` (and whatever
    ``also(mgr)`` adds), leading and with its controllers started; stopped on exit."""
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    mgr.rec = serving.setup(mgr, ConfigSource(path, interval=0.2), workers=2)  # type: ignore[attr-defined]
    mgr.also = also(mgr) if also else None  # type: ignore[attr-defined]
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    try:
        await asyncio.wait_for(mgr.is_leader.wait(), 60)
        await eventually(lambda: all(c._tasks for c in mgr.controllers), what="controllers started")
        yield mgr
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


@pytest.fixture
async def serving_op(control_plane, tmp_path):
    """The Model controller in a Manager, with a config file the test may rewrite."""
    path = tmp_path / "model-config.yaml"
    path.write_text(yaml.safe_dump(TEST_CONFIG))
    async with serving_manager(control_plane, path) as mgr:
        mgr.config_path = path  # type: ignore[attr-defined]
        yield mgr


def create_model(admin, ns: str, name: str, **spec) -> dict:
    body = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": name, "namespace": ns},
            "spec": {"features": ["TextGeneration"], "engine": "VLLM", "url": "hf://org/repo",
                     "resourceProfile": "small:1", "minReplicas": 1, **spec}}
    r = admin.post(models_url(ns), json=body)
    assert r.status_code == 201, r.text
    return r.json()


def patch_model(admin, ns: str, name: str, patch: dict) -> dict:
    r = admin.patch(models_url(ns, name), json=patch, headers=MERGE)
    assert r.status_code == 200, r.text
    return r.json()


def get_model(admin, ns: str, name: str) -> dict:
    return admin.get(models_url(ns, name)).json()


def list_pods(admin, ns: str, model: str, live_only: bool = True) -> list[dict]:
    items = admin.get(f"/api/v1/namespaces/{ns}/pods", params={"labelSelector": f"model={model}"}).json()["items"]
    if live_only:
        items = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    return sorted(items, key=lambda p: p["metadata"]["creationTimestamp"] + p["metadata"]["name"])


async def wait_pods(admin, ns: str, model: str, count: int, what: str = "", pred=None, timeout: float = 30) -> list[dict]:
    def check():
        pods = list_pods(admin, ns, model)
        ok = len(pods) == count and (pred is None or all(pred(p) for p in pods))
        return (pods,) if ok else None  # a tuple, so that zero Pods is truthy too

    found = await eventually(check, timeout=timeout, interval=0.1, what=what or f"{count} pods of {model}")
    return found[0]


def set_pod_phase(admin, ns: str, pod: dict, ready: bool = True, phase: str = "Running") -> None:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now}]}
    if phase == "Failed":
        status["reason"] = "Evicted"
    r = admin.patch(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status", json={"status": status}, headers=MERGE)
    assert r.status_code == 200, r.text


def condition(model: dict, type_: str) -> tuple[str, str, str] | None:
    for c in (model.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return c["status"], c["reason"], c["message"]
    return None


def server(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "server")


def env_names(container: dict) -> list[str]:
    return [e["name"] for e in container.get("env") or []]


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def write_config(mgr, data: dict) -> None:
    Path(mgr.config_path).write_text(yaml.safe_dump(data))
