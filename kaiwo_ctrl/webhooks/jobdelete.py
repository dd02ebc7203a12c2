"""Cleanup after an adopted Job is deleted, on the API server's word only.

An AdmissionReview is a claim, not a fact: any client that reaches the
webhook port can POST one. So a DELETE review only names a Job to look at.
Nothing is released or deleted until the Job read from the API server has
the review's UID and is being deleted (``deletionTimestamp`` set) - which
only the API server itself sets, after admission. Then the finalizer is
removed by a JSON patch that tests the UID and the finalizer's position,
and the tracking KaiwoJob is deleted only if it is the one owned by that
Job (UID precondition).

:class:`DeleteFollower` runs those checks for DELETE reviews, a bounded
number at a time, each for a bounded number of reads; past those, the
leader's sweeper (finalizers.py) still releases what is left.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.kinds import KAIWOJOBS
from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import JOBS

log = logging.getLogger("kaiwo_ctrl.webhooks.jobdelete")

FINALIZER = "kaiwo.silogen.ai/finalizer"
#: DELETE reviews followed at once; more are left to the leader's sweeper.
MAX_FOLLOWED = 64
#: Reads of a Job named by a DELETE review: 50 ms doubling, about 3 s in all.
FOLLOW_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)


def controlled_by_kaiwojob(job: Mapping[str, Any]) -> bool:
    refs = (job.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("controller") and r.get("kind") == "KaiwoJob" for r in refs)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def finalizer_release_ops(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch that removes our finalizer from ``job``: it tests the UID
    and the finalizer's position, so it can never touch another object of the
    same name, nor a Job changed since (empty: no finalizer of ours)."""
    meta = _meta(job)
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER not in finalizers:
        return []
    path = f"/metadata/finalizers/{finalizers.index(FINALIZER)}"
    return [{"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
            {"op": "test", "path": path, "value": FINALIZER}, {"op": "remove", "path": path}]


async def release_finalizer(client: Client, job: Mapping[str, Any]) -> None:
    """Remove our finalizer from ``job`` (as read from the API server)."""
    meta = _meta(job)
    ops = finalizer_release_ops(job)
    if not ops:
        return
    try:
        await client.patch(JOBS, meta["name"], ops, meta.get("namespace"), patch_type="json")
    except ApiError as e:
        if not e.not_found:
            raise


async def _delete_tracking_kaiwojob(client: Client, ns: str, name: str, job_uid: str) -> None:
    kj = await client.get_or_none(KAIWOJOBS, name, ns)
    if kj is None or not any(r.get("uid") == job_uid for r in _meta(kj).get("ownerReferences") or ()):
        return  # not the KaiwoJob that tracks this Job: never ours to delete
    await client.delete(KAIWOJOBS, name, ns, uid=_meta(kj).get("uid"))


async def cleanup_deleted_job(client: Client, ns: str, name: str, uid: str) -> bool:
    """Clean up after Job ``ns/name`` with UID ``uid`` if the API server shows it
    being deleted. ``False``: not (yet) being deleted, nothing done; ``True``:
    done, or nothing to do (gone, another UID, not ours)."""
    job = await client.get_or_none(JOBS, name, ns)
    if job is None:
        return True
    meta = _meta(job)
    if not uid or meta.get("uid") != uid or controlled_by_kaiwojob(job):
        log.info("a Job named for cleanup is not the one being deleted; nothing done",
                 extra={"namespace": ns, "object": name, "uid": uid})
        return True
    if not meta.get("deletionTimestamp"):
        return False
    if FINALIZER not in (meta.get("finalizers") or ()):
        return True
    await release_finalizer(client, job)
    await _delete_tracking_kaiwojob(client, ns, name, uid)
    log.info("adopted Job deleted: finalizer released", extra={"namespace": ns, "object": name})
    return True


class DeleteFollower:
    """Follows DELETE reviews: reads the named Job until the API server shows it
    being deleted (then cleans up), for at most ``len(FOLLOW_DELAYS)`` reads."""

    def __init__(self, client: Client, max_followed: int = MAX_FOLLOWED) -> None:
        self.client = client
        self.max_followed = max_followed
        self.followed: dict[tuple[str, str, str], asyncio.Task] = {}
        self.dropped = 0

    def follow(self, ns: str, name: str, uid: str) -> bool:
        """Start following; ``False`` when already followed or the bound is reached."""
        key = (ns, name, uid)
        if not name or not uid or key in self.followed:
            return False
        if len(self.followed) >= self.max_followed:
            self.dropped += 1
            log.warning("too many Job deletions followed at once; left to the sweeper", extra={"namespace": ns, "object": name})
            return False
        task = asyncio.create_task(self._follow(ns, name, uid), name=f"follow-delete-{ns}/{name}")
        self.followed[key] = task
        task.add_done_callback(lambda _t: self.followed.pop(key, None))
        return True

    async def _follow(self, ns: str, name: str, uid: str) -> None:
        for delay in FOLLOW_DELAYS:
            await asyncio.sleep(delay)  # the API server marks the Job only after admission answered
            try:
                if await cleanup_deleted_job(self.client, ns, name, uid):
                    return
            except ApiError as e:
                log.warning("cleanup of an adopted Job failed", extra={"namespace": ns, "object": name, "error": str(e)})
                return  # the sweeper retries
        log.info("a DELETE review named a Job the API server does not show being deleted; nothing done",
                 extra={"namespace": ns, "object": name, "uid": uid})
