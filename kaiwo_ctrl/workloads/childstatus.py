"""Status of each kind of child, mapped onto the Kaiwo status values
(batch Job, RayJob, Deployment, RayService in an AppWrapper, PVC phase) and
Kueue admission. A child that does not exist yet maps to ``""``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NEW = ""
DOWNLOADING = "DOWNLOADING"
PENDING = "PENDING"
STARTING = "STARTING"
RUNNING = "RUNNING"
READY = "READY"
COMPLETE = "COMPLETE"
ERROR = "ERROR"
FAILED = "FAILED"
TERMINATING = "TERMINATING"
TERMINATED = "TERMINATED"

TERMINAL = frozenset({COMPLETE, FAILED, TERMINATED})
ACTIVE = frozenset({NEW, DOWNLOADING, PENDING, STARTING, RUNNING})
#: Statuses in which the workload's pods are up (startTime, duration, preemption).
UP = frozenset({RUNNING, READY})


class UnknownChildStatus(ValueError):
    """A child reports a status this operator does not know (reconcile error, retry)."""


def _conditions(obj: Mapping | None) -> list[dict]:
    return list(((obj or {}).get("status") or {}).get("conditions") or [])


def _condition(obj: Mapping | None, type_: str) -> dict | None:
    return next((c for c in _conditions(obj) if c.get("type") == type_), None)


def batch_job_status(job: Mapping | None, previous: str = NEW) -> str:
    """A batch Job (also the download Job): a true Complete/SuccessCriteriaMet
    condition is COMPLETE, Failed is FAILED, Suspended is PENDING; otherwise
    failed pods FAILED, ready pods RUNNING (and RUNNING stays RUNNING), active
    pods STARTING, else PENDING. A missing Job is ``""``."""
    if job is None:
        return NEW
    for c in _conditions(job):
        if c.get("status") != "True":
            continue
        if c.get("type") in ("SuccessCriteriaMet", "Complete"):
            return COMPLETE
        if c.get("type") == "Failed":
            return FAILED
        if c.get("type") == "Suspended":
            return PENDING
    status = job.get("status") or {}
    if (status.get("failed") or 0) > 0:
        return FAILED
    if (status.get("ready") or 0) > 0:
        return RUNNING
    if previous == RUNNING:
        return RUNNING
    if (status.get("active") or 0) > 0:
        return STARTING
    return PENDING


_RAYJOB = {"": STARTING, "PENDING": STARTING, "RUNNING": RUNNING, "FAILED": FAILED, "SUCCEEDED": COMPLETE, "STOPPED": TERMINATED}


def ray_job_status(ray_job: Mapping | None) -> str:
    """A RayJob by ``jobStatus``: none/PENDING STARTING, RUNNING, FAILED,
    SUCCEEDED COMPLETE, STOPPED TERMINATED. Beyond the reference: ``jobDeploymentStatus: Failed`` (the Ray
    cluster never came up, or a deadline passed before the job was submitted)
    is FAILED; the reference stayed STARTING forever in that case."""
    if ray_job is None:
        return NEW
    status = ray_job.get("status") or {}
    if status.get("jobDeploymentStatus") == "Failed" and status.get("jobStatus", "") in ("", "PENDING"):
        return FAILED
    value = status.get("jobStatus") or ""
    if value not in _RAYJOB:
        raise UnknownChildStatus(f"RayJob {ray_job.get('metadata', {}).get('name')}: unknown jobStatus {value!r}")
    return _RAYJOB[value]


def deployment_status(deployment: Mapping | None) -> str:
    """A Deployment: ERROR past its progress deadline, STARTING until its
    generation is observed, then RUNNING while some but not all replicas are
    available (READY when every replica is, per the API reference)."""
    if deployment is None:
        return NEW
    progressing = _condition(deployment, "Progressing")
    if progressing and progressing.get("status") == "False" and progressing.get("reason") == "ProgressDeadlineExceeded":
        return ERROR
    status = deployment.get("status") or {}
    generation = (deployment.get("metadata") or {}).get("generation") or 0
    if (status.get("observedGeneration") or 0) < generation:
        return STARTING
    wanted = (deployment.get("spec") or {}).get("replicas")
    wanted = 1 if wanted is None else wanted
    if (status.get("availableReplicas") or 0) < wanted:
        return RUNNING if (status.get("readyReplicas") or 0) > 0 else STARTING
    return READY


FAILED_APP_STATUSES = frozenset({"UNHEALTHY", "DEPLOY_FAILED"})


def ray_service_status(appwrapper: Mapping | None, ray_service: Mapping | None) -> str:
    """A RayService in an AppWrapper: READY when its Ready condition is true,
    FAILED when an application is UNHEALTHY or DEPLOY_FAILED, else STARTING.
    A missing AppWrapper is ``""``; a missing RayService (the AppWrapper
    controller creates it) is STARTING. Beyond the reference: an AppWrapper in
    phase ``Failed`` is FAILED (its RayService is gone then and the reference
    reported STARTING forever)."""
    if appwrapper is None:
        return NEW
    if ((appwrapper.get("status") or {}).get("phase")) == "Failed":
        return FAILED
    if ray_service is None:
        return STARTING
    ready = _condition(ray_service, "Ready")
    if ready and ready.get("status") == "True":
        return READY
    apps = (((ray_service.get("status") or {}).get("activeServiceStatus") or {}).get("applications")) or {}
    values = apps.values() if isinstance(apps, Mapping) else apps
    if any((a or {}).get("status") in FAILED_APP_STATUSES for a in values):
        return FAILED
    return STARTING


def pvc_phase(pvc: Mapping | None) -> str | None:
    return ((pvc or {}).get("status") or {}).get("phase")


def is_admitted(workloads: Mapping | Sequence[Mapping] | None) -> bool:
    """Admitted: at least one Kueue Workload and every one has ``Admitted=True``.

    The reference counted any status but ``False`` (so ``Unknown``) as
    admitted; Kueue only ever means admission with ``True``, so that is
    required here.
    """
    items = _as_list(workloads)
    if not items:
        return False
    for wl in items:
        cond = _condition(wl, "Admitted")
        if cond is None or cond.get("status") != "True":
            return False
    return True


def _as_list(workloads: Any) -> list[Mapping]:
    if workloads is None:
        return []
    if isinstance(workloads, Mapping):
        return [workloads]
    return [w for w in workloads if w is not None]
