"""Status mapper: a RayService in an AppWrapper onto the Kaiwo status values."""

from __future__ import annotations

from collections.abc import Mapping

from ...base.childstatus import FAILED, NEW, READY, STARTING, condition_of

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
    ready = condition_of(ray_service, "Ready")
    if ready and ready.get("status") == "True":
        return READY
    # KubeRay's field is applicationStatuses (name -> {status, ...}); the reference read
    # "applications", which the RayService CRD does not have (the API server prunes it)
    apps = (((ray_service.get("status") or {}).get("activeServiceStatus") or {}).get("applicationStatuses")) or {}
    values = apps.values() if isinstance(apps, Mapping) else apps
    if any((a or {}).get("status") in FAILED_APP_STATUSES for a in values):
        return FAILED
    return STARTING
