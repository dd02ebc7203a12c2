"""The storage children every workload kind shares: the data and HF PVCs, the
download ConfigMap and the download Job (built in that order)."""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS, JOBS, PVCS

from ..builders.plan import WorkloadPlan
from ..builders.storage import build_download_configmap, build_download_job, build_pvc
from .spec import JOB_IMMUTABLE, ChildSpec, Paths

_PVC_STORAGE = "spec.resources.requests.storage"
PVC_IMMUTABLE = ("spec.accessModes", "spec.storageClassName", "spec.volumeMode", "spec.volumeName", _PVC_STORAGE)


def _data_pvc(b: WorkloadPlan) -> dict[str, Any] | None:
    s = b.storage
    return build_pvc(b.o, s, s.data_pvc_name, s.data_size) if s.data_requested else None


def _hf_pvc(b: WorkloadPlan) -> dict[str, Any] | None:
    s = b.storage
    return build_pvc(b.o, s, s.hf_pvc_name, s.hf_size) if s.hf_requested else None


def _download_configmap(b: WorkloadPlan) -> dict[str, Any] | None:
    return build_download_configmap(b.o, b.storage) if b.storage.downloads_configured else None


def _download_job(b: WorkloadPlan) -> dict[str, Any] | None:
    return build_download_job(b.o, b.storage, b.world) if b.storage.downloads_configured else None


def _pvc(key: str, suffix: str, build: Any) -> ChildSpec:
    return ChildSpec(
        PVCS, build=build, suffix=suffix, paths=Paths(immutable=PVC_IMMUTABLE, growable=(_PVC_STORAGE,)),
        terminate=True, key=key,
    )


# The status machine's storage step reads these (PVC phase, download Job
# state) by their slots, so they carry no status mapper of their own.
DATA_PVC = _pvc("data_pvc", "data", _data_pvc)
HF_PVC = _pvc("hf_pvc", "hf", _hf_pvc)
# a ConfigMap has no status to follow: not watched
DOWNLOAD_CONFIGMAP = ChildSpec(
    CONFIGMAPS, build=_download_configmap, suffix="download", watch=None, key="download_configmap"
)
DOWNLOAD_JOB = ChildSpec(
    JOBS, build=_download_job, suffix="download", paths=Paths(immutable=JOB_IMMUTABLE), terminate=True,
    key="download_job",
)
STORAGE_CHILDREN: tuple[ChildSpec, ...] = (DATA_PVC, HF_PVC, DOWNLOAD_CONFIGMAP, DOWNLOAD_JOB)
