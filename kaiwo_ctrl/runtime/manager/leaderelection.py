"""Lease-based leader election (coordination.k8s.io/v1).

Expiry is judged on the local monotonic clock from the moment we last saw the
lease record *change*, never from the renewTime it carries, so clock skew
between nodes does not matter. Defaults: lease 15 s, renew deadline 10 s,
retry 2 s (jittered ×[1, 2.2) while waiting to acquire).

The leader renews every retry period, first straight from the record it last
wrote (fast path), then by re-reading (slow path). If it cannot renew within
the renew deadline it has lost the lease and must stop acting at once.

A Lease namespace that does not exist is not retried: :meth:`acquire` raises
:class:`LeaseNamespaceMissing` at the first attempt.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import LEASES

log = logging.getLogger("kaiwo_ctrl.runtime.manager.leaderelection")


def micro_time(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class LeaseNamespaceMissing(RuntimeError):
    """The Lease's namespace does not exist: retrying cannot help, so the caller
    should stop with this message instead of waiting for a lease forever."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace, self.name = namespace, name
        super().__init__(f"the leader-election namespace {namespace!r} (Lease {name!r}) does not exist")


class LeaderElector:
    def __init__(
        self,
        client: Client,
        name: str,
        namespace: str,
        *,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        release_on_cancel: bool = True,
        on_status: Callable[[bool], None] | None = None,
        on_slow_path: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not lease_duration > renew_deadline > 1.2 * retry_period:
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period")
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self.on_status = on_status
        self.on_slow_path = on_slow_path
        self.clock = clock
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._observed_key: tuple[Any, ...] | None = None
        self.is_leader = False
        self.last_renew = 0.0

    # ----------------------------------------------------------- lease I/O
    def _spec(self, transitions: int, acquire_time: str | None) -> dict[str, Any]:
        now = micro_time()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = lease.get("spec") or {}
        key = (spec.get("holderIdentity"), spec.get("renewTime"), lease["metadata"].get("resourceVersion"))
        if key != self._observed_key:
            self._observed_key = key
            self._observed_at = self.clock()
        self._observed = lease

    async def try_acquire_or_renew(self, fast: bool = False) -> bool:
        """One attempt; True when we hold the lease afterwards."""
        if fast and self._observed is not None and self.is_leader:
            lease = self._observed
        else:
            if fast and self.on_slow_path:
                self.on_slow_path()
            try:
                lease = await self.client.get(LEASES, self.name, self.namespace)
            except ApiError as e:
                if not e.not_found:
                    raise
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(0, None),
                }
                try:
                    created = await self.client.create(LEASES, body)
                except ApiError as ce:
                    if ce.already_exists or ce.conflict:
                        return False
                    if ce.not_found and (ce.body.get("details") or {}).get("kind") == "namespaces":
                        raise LeaseNamespaceMissing(self.namespace, self.name) from ce
                    raise
                self._observe(created)
                return True
            self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity:
            duration = spec.get("leaseDurationSeconds") or self.lease_duration
            if self._observed_at + duration > self.clock():
                return False  # held by someone else and not expired
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire_time = spec.get("acquireTime") if holder == self.identity else None
        if holder != self.identity:
            transitions += 1
        new = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease["metadata"]["resourceVersion"],
            },
            "spec": self._spec(transitions, acquire_time),
        }
        try:
            updated = await self.client.replace(LEASES, new)
        except ApiError as e:
            if e.conflict:
                if fast:
                    return await self.try_acquire_or_renew(fast=False)
                return False
            raise
        self._observe(updated)
        return True

    async def release(self) -> None:
        """Give the lease up so a standby takes over within a retry period."""
        if not self.is_leader or self._observed is None:
            return
        lease = self._observed
        spec = dict(lease.get("spec") or {})
        spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time()})
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": lease["metadata"]["resourceVersion"]},
            "spec": spec,
        }
        try:
            await self.client.replace(LEASES, body)
        except ApiError as e:
            log.warning("could not release lease", extra={"error": str(e)})
        self._set(False)

    def _set(self, leader: bool) -> None:
        if leader != self.is_leader:
            self.is_leader = leader
            if self.on_status:
                self.on_status(leader)

    # ---------------------------------------------------------------- loops
    async def acquire(self) -> None:
        """Block until we hold the lease."""
        log.info("waiting for leader lease", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})
        while True:
            try:
                if await self.try_acquire_or_renew():
                    self.last_renew = self.clock()
                    self._set(True)
                    log.info("acquired leader lease", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})
                    return
            except ApiError as e:
                log.warning("leader election attempt failed", extra={"error": str(e)})
            await asyncio.sleep(self.retry_period * random.uniform(1.0, 2.2))

    async def hold(self) -> None:
        """Renew until we cannot; returns when leadership is lost."""
        while True:
            await asyncio.sleep(self.retry_period)
            deadline = self.last_renew + self.renew_deadline
            renewed = False
            while self.clock() < deadline:
                try:
                    if await asyncio.wait_for(self.try_acquire_or_renew(fast=True), max(0.1, deadline - self.clock())):
                        renewed = True
                        break
                except (ApiError, asyncio.TimeoutError) as e:
                    log.warning("lease renewal failed", extra={"error": str(e)})
                await asyncio.sleep(min(self.retry_period / 4, max(0.0, deadline - self.clock())))
            if not renewed:
                self._set(False)
                log.error("lost leader lease", extra={"lease": f"{self.namespace}/{self.name}"})
                return
            self.last_renew = self.clock()

    def healthy(self, tolerance: float = 20.0) -> bool:
        """False when we believe we lead but have not renewed for lease + tolerance."""
        return not self.is_leader or self.clock() - self.last_renew < self.lease_duration + tolerance
