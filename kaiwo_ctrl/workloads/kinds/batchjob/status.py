"""Status mapper: a batch Job onto the Kaiwo status values (the download Job uses it too)."""

from __future__ import annotations

from collections.abc import Mapping

from ...base.childstatus import COMPLETE, FAILED, NEW, PENDING, RUNNING, STARTING, conditions_of
from ...base.observed import ObservedChildren


def batch_job_status(job: Mapping | None, previous: str = NEW) -> str:
    """A batch Job (also the download Job): a true Complete/SuccessCriteriaMet
    condition is COMPLETE, Failed is FAILED, Suspended is PENDING; otherwise
    failed pods FAILED, ready pods RUNNING (and RUNNING stays RUNNING), active
    pods STARTING, else PENDING. A missing Job is ``""``."""
    if job is None:
        return NEW
    for c in conditions_of(job):
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


def status(children: ObservedChildren, previous: str) -> str:
    return batch_job_status(children.main, previous)
