"""Status mapper: a RayJob onto the Kaiwo status values."""

from __future__ import annotations

from collections.abc import Mapping

from ...base.childstatus import COMPLETE, FAILED, NEW, RUNNING, STARTING, TERMINATED, UnknownChildStatus
from ...base.observed import ObservedChildren

_RAYJOB = {"": STARTING, "PENDING": STARTING, "RUNNING": RUNNING, "FAILED": FAILED, "SUCCEEDED": COMPLETE, "STOPPED": TERMINATED}


def ray_job_status(ray_job: Mapping | None) -> str:
    """A RayJob by ``jobStatus``: none/PENDING STARTING, RUNNING, FAILED,
    SUCCEEDED COMPLETE, STOPPED TERMINATED. Beyond the reference:
    ``jobDeploymentStatus: Failed`` is FAILED whatever ``jobStatus`` says (but
    STOPPED): KubeRay v1.6.2 fails a RayJob without touching ``jobStatus`` when
    its submitter Job fails or ``activeDeadlineSeconds`` passes, so a job that
    had started stays ``jobStatus: RUNNING`` (its rayjob_controller.go); the
    reference stayed RUNNING (or STARTING) for ever."""
    if ray_job is None:
        return NEW
    status = ray_job.get("status") or {}
    if status.get("jobDeploymentStatus") == "Failed" and status.get("jobStatus", "") != "STOPPED":
        return FAILED
    value = status.get("jobStatus") or ""
    if value not in _RAYJOB:
        raise UnknownChildStatus(f"RayJob {ray_job.get('metadata', {}).get('name')}: unknown jobStatus {value!r}")
    return _RAYJOB[value]


def status(children: ObservedChildren, previous: str) -> str:
    return ray_job_status(children.main)
