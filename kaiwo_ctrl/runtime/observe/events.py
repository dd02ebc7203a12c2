"""Event recorder: core/v1 Events that ``kubectl describe`` shows.

Recording never blocks a reconcile: events go into bounded queues (20000 in
all, dropped when full) that ``workers`` background tasks (default 8) write
concurrently. Events are sharded by the object they are about, so one
object's events are written in order by one writer, and identical events
(same object, type, reason, message) are still folded into one Event whose
``count`` and ``lastTimestamp`` are bumped. A per-object token bucket (burst
25, one token per 300 s) keeps a hot loop from flooding the API server.

The writers use their own connection pool of ``workers`` connections, so a
burst of Events can never take connections that reconcile writes are waiting
for, and never has more than ``workers`` requests in flight.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.observe.conditions import format_time
from kaiwo_ctrl.runtime.api.resources import EVENTS
from kaiwo_ctrl.runtime.process.supervise import supervise

log = logging.getLogger("kaiwo_ctrl.runtime.observe.events")

NORMAL = "Normal"
WARNING = "Warning"


def _now() -> str:
    return format_time(dt.datetime.now(dt.timezone.utc))


class _Bucket:
    def __init__(self, burst: int, refill_every: float) -> None:
        self.tokens = float(burst)
        self.burst = burst
        self.refill_every = refill_every
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) / self.refill_every)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class EventRecorder:
    def __init__(
        self,
        client: Client,
        component: str,
        *,
        workers: int = 8,
        max_queue: int = 20000,
        lru: int = 4096,
        burst: int = 25,
        refill_every: float = 300.0,
    ) -> None:
        """``workers``: concurrent Event writes (and connections of their own pool);
        ``max_queue``: events held while the writers are busy, beyond which new ones
        are dropped; ``lru``: objects whose aggregation and spam-filter state is kept;
        ``burst``/``refill_every``: the per-object token bucket."""
        self.client = client.with_own_pool(workers)
        self.component = component
        self.host = socket.gethostname()
        self._workers = max(1, workers)
        shard_size = max(1, max_queue // self._workers)
        self._queues: list[asyncio.Queue[tuple[dict[str, Any], str, str, str]]] = [
            asyncio.Queue(shard_size) for _ in range(self._workers)
        ]
        self._seen: OrderedDict[tuple[str, str, str, str, str], dict[str, Any]] = OrderedDict()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lru = lru
        self._burst, self._refill = burst, refill_every
        self._tasks: list[asyncio.Task] = []
        self._pending = 0
        self.dropped = 0
        self.written = 0

    def for_component(self, component: str) -> "ComponentRecorder":
        return ComponentRecorder(self, component)

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str, component: str | None = None) -> None:
        ref = _ref(obj)
        if ref.get("name") is None:
            return
        shard = hash(ref.get("uid") or (ref.get("namespace"), ref["name"])) % self._workers
        try:
            self._queues[shard].put_nowait((ref, type_, reason, message[:1024] + ("\0" + component if component else "")))
            self._pending += 1
        except asyncio.QueueFull:
            self.dropped += 1
        if not self._tasks or self._tasks[0].done():
            try:
                self._tasks = [supervise(f"event-writer-{i}", functools.partial(self._run, q)) for i, q in enumerate(self._queues)]
            except RuntimeError:
                pass  # no running loop yet: the writers start with the first event recorded from one

    @property
    def backlog(self) -> int:
        """Events queued or being written."""
        return self._pending

    async def flush(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        await self.flush()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.client.close()

    async def _run(self, queue: asyncio.Queue[tuple[dict[str, Any], str, str, str]]) -> None:
        while True:
            ref, type_, reason, packed = await queue.get()
            message, _, component = packed.partition("\0")
            try:
                await self._write(ref, type_, reason, message, component or self.component)
            except ApiError as e:
                log.debug("event not recorded", extra={"error": str(e), "reason": reason})
            except Exception:  # events are best effort
                log.exception("event recorder failed")
            finally:
                self._pending -= 1

    async def _write(self, ref: dict[str, Any], type_: str, reason: str, message: str, component: str) -> None:
        uid = ref.get("uid") or f"{ref.get('namespace')}/{ref['name']}"
        # the spam filter is per (reporting component, object, type): one
        # component's steady warnings must not starve another's events
        bucket_key = f"{component}\0{uid}\0{type_}"
        bucket = self._buckets.get(bucket_key)
        if bucket is None:
            bucket = self._buckets[bucket_key] = _Bucket(self._burst, self._refill)
            if len(self._buckets) > self._lru:
                self._buckets.popitem(last=False)
        key = (component, uid, type_, reason, message)
        prev = self._seen.get(key)
        if not bucket.take():
            return
        ns = ref.get("namespace") or "default"
        now = _now()
        if prev is not None:
            self._seen.move_to_end(key)
            prev["count"] += 1
            try:
                await self.client.patch(EVENTS, prev["name"], {"count": prev["count"], "lastTimestamp": now}, ns, decode=False)
                self.written += 1
                return
            except ApiError as e:
                if not e.not_found:
                    raise
        name = f"{ref['name']}.{os.urandom(8).hex()}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": component, "host": self.host},
            "reportingComponent": component,
            "reportingInstance": f"{component}-{self.host}"[:128],
        }
        await self.client.create(EVENTS, body, decode=False)
        self.written += 1
        self._seen[key] = {"name": name, "count": 1}
        if len(self._seen) > self._lru:
            self._seen.popitem(last=False)


class ComponentRecorder:
    """An :class:`EventRecorder` view that stamps one component name."""

    def __init__(self, recorder: EventRecorder, component: str) -> None:
        self.recorder, self.component = recorder, component

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.recorder.event(obj, type_, reason, message, self.component)

    def normal(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.event(obj, NORMAL, reason, message)

    def warning(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.event(obj, WARNING, reason, message)


def _ref(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    ref = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: v for k, v in ref.items() if v}
