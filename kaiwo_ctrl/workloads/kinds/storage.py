"""The storage children every workload kind shares: the data and HF PVCs, the
download ConfigMap and the download Job (built in that order)."""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS, JOBS, PVCS

from ..storage import build_download_configmap, build_download_job, build_pvc
from ..plan import WorkloadPlan
from .spec import ChildSpec

#: A Job's pod template and selector cannot change once it exists.
JOB_IMMUTABLE = ("spec.template", "spec.selector", "spec.completionMode", "spec.completions")
#: Kueue unsuspends admitted workloads: ``spec.suspend`` is theirs once the object exists.
SUSPEND = ("spec.suspend",)
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


def _pvc(slot: str, suffix: str, build: Any) -> ChildSpec:
    return ChildSpec(
        "PersistentVolumeClaim", PVCS, slot, suffix=suffix, build=build,
        immutable=PVC_IMMUTABLE, growable=(_PVC_STORAGE,), terminate=True,
    )


# The status machine's storage step reads these slots (PVC phase, download Job
# state), so they carry no status mapper of their own.
STORAGE_CHILDREN: tuple[ChildSpec, ...] = (
    _pvc("data_pvc", "data", _data_pvc),
    _pvc("hf_pvc", "hf", _hf_pvc),
    # a ConfigMap has no status to follow: not watched
    ChildSpec("ConfigMap", CONFIGMAPS, "download_configmap", suffix="download", build=_download_configmap, watch=None),
    ChildSpec(
        "Job", JOBS, "download_job", suffix="download", build=_download_job, immutable=JOB_IMMUTABLE, terminate=True
    ),
)
