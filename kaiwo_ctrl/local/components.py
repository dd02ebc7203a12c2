"""Command lines of the simulated cluster's components (``local up --simulate``).

kube-controller-manager (the job, ReplicaSet, Deployment, EndpointSlice, namespace
and garbage collection controllers), kube-scheduler and kwok run next to etcd and
kube-apiserver, so Pods of Jobs and Deployments are scheduled onto kwok's fake
Nodes and finish. (Kueue, which needs its webhooks installed first, and the simulated Ray
dashboard, KubeRay and AppWrapper (:mod:`.ray`) are started by
:meth:`kaiwo_ctrl.local.controlplane.ControlPlane.start_component`.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import kwokstreams
from .process import ControlPlaneError, free_port


@dataclass(frozen=True)
class Simulation:
    """How kwok simulates the kubelet's streaming API (see :mod:`.kwokstreams`)."""

    certs: Path
    #: pod port -> port on 127.0.0.1; None: :data:`kwokstreams.DEFAULT_FORWARDS`
    forwards: Mapping[int, int] | None = None
    exec_: bool = True


#: the simulated Pods' addresses (loopback; clear of the 127.0.0.x the tests' fake servers use)
POD_CIDR = "127.64.0.0/16"


def component_args(
    name: str, binary: Callable[[str], Path], kubeconfig: Path, directory: Path, kwok_stages: Path | None,
    sim: Simulation | None = None,
) -> list[str]:
    """argv of component ``name`` connecting with ``kubeconfig``; files it needs go to ``directory``."""
    if name == "controller-manager":
        return [
            str(binary("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--controllers=job-controller,garbage-collector-controller,namespace-controller,"
            "replicaset-controller,deployment-controller,"
            # KubeRay counts a RayService's Serve endpoints from its Service's EndpointSlices
            "endpointslice-controller,"
            # claims bind to pre-made PersistentVolumes of a StorageClass without a provisioner,
            # and a deleted claim or volume loses its protection finalizer (as on a real cluster;
            # nothing provisions volumes here)
            "persistentvolume-binder-controller,persistentvolume-protection-controller,"
            "persistentvolumeclaim-protection-controller",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            "--concurrent-job-syncs=10",
        ]
    if name == "scheduler":
        # one scheduler, two profiles: the default one and ``kaiwo-scheduler``,
        # the scheduler name the operator puts on the pods it generates
        cfg_path = directory / "scheduler-config.yaml"
        cfg_path.write_text(yaml.safe_dump(scheduler_config(str(kubeconfig))))
        return [
            str(binary("kube-scheduler")),
            f"--config={cfg_path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
        ]
    if name == "kwok":
        if kwok_stages is None or sim is None:
            raise ControlPlaneError("kwok stages missing; run ./hack/envtest/build.sh")
        # the stages plus the logs/exec/port-forward rules; kwok serves them as the Nodes' kubelet
        cfg = kwokstreams.write_config(directory / "kwok", kwok_stages, forwards=sim.forwards, exec_=sim.exec_)
        return [
            str(binary("kwok")),
            f"--kubeconfig={kubeconfig}",
            f"--config={cfg}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # simulated Pods get loopback addresses: anything that connects to a Pod IP
            # (the proxy, the engine-metrics scraper) stays on this machine (kwok's
            # default, 10.0.0.0/24, would send it to the network)
            f"--cidr={POD_CIDR}",
            *kwokstreams.kwok_args(sim.certs, free_port()),
        ]
    raise ControlPlaneError(f"unknown component {name!r}")


def scheduler_config(kubeconfig: str) -> dict:
    """kube-scheduler configuration with the default and the ``kaiwo-scheduler`` profiles.

    ``kaiwo-scheduler`` packs GPU pods onto the fullest nodes first, the way a
    GPU cluster's scheduler is usually tuned.
    """
    gpu_packing = {
        "name": "NodeResourcesFit",
        "args": {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": [{"name": "amd.com/gpu", "weight": 5}, {"name": "nvidia.com/gpu", "weight": 5}],
                "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]},
            }
        },
    }
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {"schedulerName": "default-scheduler"},
            {"schedulerName": "kaiwo-scheduler", "pluginConfig": [gpu_packing]},
        ],
    }
