"""A simulated cluster for the e2e tests and ``hack/run-local.sh --simulate``.

On top of the real local control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler serving both the default and the
``kaiwo-scheduler`` profile, and kwok, see :mod:`kaiwo_ctrl.local.controlplane`)
this adds what a Kaiwo cluster has and the plain control plane lacks:

* kwok stages in which a Job's Pod stays Running for a while before it
  succeeds (the stock "fast" stages complete it at once, so nobody could see
  it run);
* the admission plugin ``OwnerReferencesPermissionEnforcement``, so setting
  ``blockOwnerDeletion`` really needs ``<owner>/finalizers: update``;
* a Kueue stand-in, :func:`admit_job` / :func:`admit_pod`: Kueue itself does
  not run here. It does what Kueue does for an admitted workload, minimally:
  it creates the Workload of the Job (labelled ``kueue.x-k8s.io/job-uid``,
  owned by the Job) with ``QuotaReserved`` and ``Admitted`` conditions and an
  admission in the ClusterQueue, then sets the Job's ``spec.suspend`` to
  false. For a Deployment's Pods it creates one admitted Workload per Pod.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from kaiwo_ctrl.local.controlplane import Assets, ControlPlane, locate_assets

ROOT = Path(__file__).resolve().parents[1]
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: How long a simulated Job Pod stays Running before kwok marks it Succeeded.
POD_RUN_MS = int(os.environ.get("KAIWO_SIM_POD_RUN_MS", "8000"))


def slow_job_stages(src: Path, dst: Path, run_ms: int = POD_RUN_MS) -> Path:
    """A copy of kwok's stages where ``pod-complete`` waits ``run_ms`` first."""
    docs = [d for d in yaml.safe_load_all(src.read_text()) if d]
    for d in docs:
        if d.get("kind") == "Stage" and d["metadata"]["name"] == "pod-complete":
            d["spec"]["delay"] = {"durationMilliseconds": run_ms}
    dst.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return dst


class SimPlane(ControlPlane):
    """The simulated control plane with owner-reference permission enforcement on,
    as production clusters have it (blockOwnerDeletion then needs RBAC on
    ``<owner>/finalizers``)."""

    def apiserver_args(self) -> list[str]:
        return super().apiserver_args() + ["--enable-admission-plugins=OwnerReferencesPermissionEnforcement"]


def sim_assets(directory: Path) -> Assets:
    assets = locate_assets(build=True)
    if assets.kwok_stages is None:
        raise RuntimeError("kwok stages missing; run ./hack/envtest/build.sh")
    directory.mkdir(parents=True, exist_ok=True)
    assets.kwok_stages = slow_job_stages(assets.kwok_stages, directory / "kwok-stages-slow-jobs.yaml")
    return assets


def third_party_crds(plane: ControlPlane) -> list[Path]:
    """Kueue, KubeRay, AppWrapper, ... CRDs (ours come from config/default)."""
    own = (ROOT / "config" / "crd").resolve()
    return [f for f in plane.crd_files() if own not in f.resolve().parents]


def start_sim_plane(directory: Path) -> SimPlane:
    """etcd + apiserver + controller-manager + scheduler (default and kaiwo-scheduler profiles) + kwok.

    Only third-party CRDs are installed: the operator's come from
    ``kubectl apply -k config/default``, as in a real installation.
    """
    plane = SimPlane(directory, sim_assets(directory), components=("controller-manager", "scheduler", "kwok"))
    plane.start(install_crds=False)
    try:
        plane.install_crds(third_party_crds(plane))
    except BaseException:
        plane.stop()
        raise
    plane.save_state()
    return plane


# ----------------------------------------------------------------------------- Kueue stand-in


def _check(r: httpx.Response, what: str) -> dict:
    if r.status_code >= 300:
        raise RuntimeError(f"{what}: {r.status_code} {r.text[:500]}")
    return r.json()


def _admitted_workload(
    h: httpx.Client, name: str, namespace: str, owner: dict, template: dict, count: int, queue: str, cluster_queue: str
) -> dict:
    meta = owner["metadata"]
    api_version, kind = ("batch/v1", "Job") if name.startswith("job-") else ("v1", "Pod")
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": owner.get("apiVersion") or api_version,
                    "kind": owner.get("kind") or kind,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"queueName": queue, "podSets": [{"name": "main", "count": count, "template": template}]},
    }
    r = h.post(f"{KUEUE}/namespaces/{namespace}/workloads", json=body)
    wl = _check(r, "create Workload") if r.status_code != 409 else h.get(f"{KUEUE}/namespaces/{namespace}/workloads/{name}").json()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [
        {"type": t, "status": "True", "reason": r_, "message": m, "lastTransitionTime": now}
        for t, r_, m in (
            ("QuotaReserved", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}"),
            ("Admitted", "Admitted", f"Admitted by ClusterQueue {cluster_queue} (simulated: Kueue is not running)"),
        )
    ]
    status = {
        "status": {
            "conditions": conditions,
            "admission": {"clusterQueue": cluster_queue, "podSetAssignments": [{"name": "main", "count": count}]},
        }
    }
    return _check(
        h.patch(
            f"{KUEUE}/namespaces/{namespace}/workloads/{name}/status",
            content=json.dumps(status),
            headers={"Content-Type": "application/merge-patch+json"},
        ),
        "admit Workload",
    )


def admit_job(h: httpx.Client, job: dict, cluster_queue: str = "kaiwo") -> dict:
    """Play Kueue for a suspended batch Job: an admitted Workload, then unsuspend."""
    meta = job["metadata"]
    queue = (meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name", cluster_queue)
    count = job["spec"].get("parallelism", 1)
    wl = _admitted_workload(
        h, f"job-{meta['name']}"[:63], meta["namespace"], job, job["spec"]["template"], count, queue, cluster_queue
    )
    _check(
        h.patch(
            f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}",
            content=json.dumps({"spec": {"suspend": False}}),
            headers={"Content-Type": "application/merge-patch+json"},
        ),
        "unsuspend Job",
    )
    return wl


def admit_pod(h: httpx.Client, pod: dict, cluster_queue: str = "kaiwo") -> dict:
    """Play Kueue for one Pod of a Deployment: an admitted Workload for it."""
    meta = pod["metadata"]
    queue = (meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name", cluster_queue)
    template = {"metadata": {"labels": meta.get("labels") or {}}, "spec": pod["spec"]}
    return _admitted_workload(h, f"pod-{meta['name']}"[:63], meta["namespace"], pod, template, 1, queue, cluster_queue)


def kueue_stand_in(h: httpx.Client, namespace: str, stop_after: float | None = None) -> None:
    """Admit every suspended Kaiwo Job and every Kaiwo Pod without a Workload, until stopped."""
    deadline = None if stop_after is None else time.monotonic() + stop_after
    done: set[str] = set()
    while deadline is None or time.monotonic() < deadline:
        jobs = h.get(f"/apis/batch/v1/namespaces/{namespace}/jobs", params={"labelSelector": "kaiwo.silogen.ai/run-id"}).json()
        for job in jobs.get("items", []):
            uid = job["metadata"]["uid"]
            if uid not in done and job["spec"].get("suspend"):
                admit_job(h, job)
                done.add(uid)
                print(f"[kueue stand-in] admitted Job {namespace}/{job['metadata']['name']}", flush=True)
        pods = h.get(f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": "kaiwo.silogen.ai/run-id"}).json()
        for pod in pods.get("items", []):
            owners = {o.get("kind") for o in pod["metadata"].get("ownerReferences") or []}
            uid = pod["metadata"]["uid"]
            if uid not in done and "ReplicaSet" in owners and not pod["metadata"].get("deletionTimestamp"):
                admit_pod(h, pod)
                done.add(uid)
                print(f"[kueue stand-in] admitted Pod {namespace}/{pod['metadata']['name']}", flush=True)
        time.sleep(0.5)


# ----------------------------------------------------------------------------- CLI for run-local


def _plane_from_state(directory: Path) -> ControlPlane:
    state = json.loads((directory / "state.json").read_text())
    plane = ControlPlane(directory, locate_assets(build=False) if os.environ.get("KAIWO_CTRL_ASSETS") else locate_assets())
    plane.api_port = state["api_port"]
    return plane


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.simcluster", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sa = sub.add_parser("assets", help="write an assets directory (for KAIWO_CTRL_ASSETS) whose kwok stages keep Job Pods running a while")
    sa.add_argument("--dir", type=Path, required=True)
    ku = sub.add_parser("kueue-stand-in", help="admit the Kaiwo workloads of a namespace (foreground)")
    ku.add_argument("--dir", type=Path, required=True)
    ku.add_argument("--namespace", required=True)
    args = p.parse_args(argv)
    if args.cmd == "assets":
        base = locate_assets(build=True)
        out = args.dir.resolve()
        out.mkdir(parents=True, exist_ok=True)
        for name, target in (("bin", base.bin_dir), ("crds", base.crd_dirs[-1])):
            link = out / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)
        if base.kwok_stages is None:
            raise SystemExit("kwok stages missing; run ./hack/envtest/build.sh")
        slow_job_stages(base.kwok_stages, out / "kwok-stages.yaml")
        print(out)
        return 0
    plane = _plane_from_state(args.dir.resolve())
    stop = {"now": False}

    def on_signal(*_: Any) -> None:
        stop["now"] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    with plane.http() as h:
        try:
            kueue_stand_in(h, args.namespace)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
