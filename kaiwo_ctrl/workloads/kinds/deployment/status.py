"""Status mapper: a Deployment onto the Kaiwo status values."""

from __future__ import annotations

from collections.abc import Mapping

from ...base.childstatus import ERROR, NEW, READY, RUNNING, STARTING, condition_of
from ...base.observed import ObservedChildren


def deployment_status(deployment: Mapping | None) -> str:
    """A Deployment: ERROR past its progress deadline, STARTING until its
    generation is observed, then RUNNING while some but not all replicas are
    available (READY when every replica is, per the API reference)."""
    if deployment is None:
        return NEW
    progressing = condition_of(deployment, "Progressing")
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


def status(children: ObservedChildren, previous: str) -> str:
    return deployment_status(children.main)
