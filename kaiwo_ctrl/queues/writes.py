"""The queue-config reconciler's writes, and its waits for the caches to show them.

:class:`KueueWriter` carries out a :class:`~kaiwo_ctrl.queues.plan.Plan`:
deletes, re-creates (delete, then create), creates, updates. A failed write is
recorded (an event and a status line) and does not stop the others. After
writing, it waits (briefly) until the caches show its own writes, so the next
pass never plans the same write twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kaiwo_ctrl.kinds import CLUSTERQUEUES, LOCALQUEUES, RESOURCEFLAVORS, TOPOLOGIES, WORKLOADPRIORITYCLASSES
from kaiwo_ctrl.runtime.objects import objpath
from kaiwo_ctrl.runtime.api.client import ApiError, Client, Resource
from kaiwo_ctrl.runtime.control.expectations import newer_or_same, wait_observed
from kaiwo_ctrl.runtime.cache.informer import Informer

from .constants import CLUSTER_QUEUE, LOCAL_QUEUE, RESOURCE_FLAVOR, TOPOLOGY, WORKLOAD_PRIORITY_CLASS
from .events import sync_event
from .plan import Plan, key_str, object_key

log = logging.getLogger("kaiwo_ctrl.queues")

#: How long a reconcile waits for the caches to show its own writes.
CACHE_WAIT = 5.0

KUEUE_RESOURCES: dict[str, Resource] = {
    TOPOLOGY: TOPOLOGIES,
    RESOURCE_FLAVOR: RESOURCEFLAVORS,
    WORKLOAD_PRIORITY_CLASS: WORKLOADPRIORITYCLASSES,
    CLUSTER_QUEUE: CLUSTERQUEUES,
    LOCAL_QUEUE: LOCALQUEUES,
}


@dataclass
class WriteStats:
    """Requests the reconciler made, by target (tests and the benchmark read these)."""

    node_patches: int = 0
    queue_config_creates: int = 0
    queue_config_updates: int = 0
    status_writes: int = 0
    kueue: dict[str, int] = field(default_factory=dict)
    reconciles: int = 0

    @property
    def queue_config_writes(self) -> int:
        return self.queue_config_creates + self.queue_config_updates

    @property
    def kueue_writes(self) -> int:
        return sum(self.kueue.values())

    def count_kueue(self, action: str, kind: str) -> None:
        key = f"{action} {kind}"
        self.kueue[key] = self.kueue.get(key, 0) + 1


def truncate(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_text(err: BaseException) -> str:
    """A bounded one-line description of a failed request (for logs, events and status)."""
    if isinstance(err, ApiError):
        return truncate(f"{err.status} {err.reason}: {err.message}".strip())
    return truncate(str(err) or type(err).__name__)


# ---------------------------------------------------------------------------
# Waiting for the caches
# ---------------------------------------------------------------------------


@dataclass
class Expect:
    """A write the cache must show before the next plan is computed."""

    informer: Informer
    name: str
    namespace: str | None
    check: Callable[[Mapping[str, Any] | None], bool]


def expect_version(informer: Informer, written: Mapping[str, Any]) -> Expect:
    """The cache holds ``written`` or something newer."""
    m = objpath.meta(written)
    return Expect(informer, m.get("name", ""), m.get("namespace"), newer_or_same(written))


def gone_or_replaced(uid: str) -> Callable[[Mapping[str, Any] | None], bool]:
    """Seen in the cache once the object with ``uid`` is gone, replaced or being deleted."""

    def seen(obj: Mapping[str, Any] | None) -> bool:
        return obj is None or objpath.uid(obj) != uid or objpath.deleting(obj)

    return seen


async def wait_cache(expectations: list[Expect], timeout: float = CACHE_WAIT) -> bool:
    """Wait until every expectation holds; False (logged at debug) when ``timeout`` passes first."""
    pending = [(partial(e.informer.get, e.name, e.namespace), e.check) for e in expectations]
    if await wait_observed(pending, timeout):
        return True
    log.debug("cache did not catch up with our writes", extra={"pending": len(pending)})
    return False


# ---------------------------------------------------------------------------
# Carrying out a plan
# ---------------------------------------------------------------------------


class KueueWriter:
    """Writes the Kueue objects of one plan, counting them in ``stats`` and
    recording an event on the queue config for each."""

    def __init__(self, client: Client, informers: Mapping[str, Informer], stats: WriteStats, recorder: Any) -> None:
        self.client = client
        self.informers = informers
        self.stats = stats
        self.recorder = recorder

    async def apply(self, queue_config: dict, plan: Plan, existing: list[dict], failures: dict) -> bool:
        """Deletes, re-creates (delete then create), creates, updates. Failures are
        recorded in ``failures`` (key -> status line) and do not stop the other
        writes. Returns whether anything was written."""
        have = {object_key(o): o for o in existing}
        expectations: list[Expect] = []
        wrote = False
        for obj in plan.deletes:
            wrote |= await self._delete(queue_config, obj, failures, expectations)
        for obj in plan.recreates:
            old = have.get(object_key(obj))
            if old is not None and not await self._delete(queue_config, old, failures, expectations):
                continue
            wrote = True
            blocked = "re-create: waiting for the old object to finish deleting"
            await self._create(queue_config, obj, blocked, failures, expectations)
        for obj in plan.creates:
            wrote |= await self._create(queue_config, obj, "", failures, expectations)
        for obj in plan.updates:
            wrote |= await self._update(queue_config, obj, failures, expectations)
        await wait_cache(expectations)
        return wrote

    async def _delete(self, queue_config: dict, obj: Mapping[str, Any], failures: dict, expectations: list[Expect]) -> bool:
        kind, ns, name = object_key(obj)
        try:
            await self.client.delete(KUEUE_RESOURCES[kind], name, ns, uid=objpath.uid(obj))
        except ApiError as e:
            self._fail(queue_config, "Delete", obj, e, failures)
            return False
        gone = Expect(self.informers[kind], name, ns, gone_or_replaced(objpath.uid(obj)))
        return self._written(queue_config, "Delete", obj, gone, expectations)

    async def _create(
        self, queue_config: dict, obj: Mapping[str, Any], blocked_reason: str, failures: dict, expectations: list[Expect]
    ) -> bool:
        """Create ``obj``; with ``blocked_reason``, a namesake still in the way is
        reported with that reason instead of as a failure."""
        kind, _, _ = object_key(obj)
        try:
            out = await self.client.create(KUEUE_RESOURCES[kind], obj)
        except ApiError as e:
            if e.already_exists and blocked_reason:
                failures[object_key(obj)] = blocked_reason
                return False
            self._fail(queue_config, "Create", obj, e, failures)
            return False
        return self._written(queue_config, "Create", obj, expect_version(self.informers[kind], out), expectations)

    async def _update(self, queue_config: dict, obj: Mapping[str, Any], failures: dict, expectations: list[Expect]) -> bool:
        kind, _, _ = object_key(obj)
        try:
            out = await self.client.replace(KUEUE_RESOURCES[kind], obj)
        except ApiError as e:
            self._fail(queue_config, "Update", obj, e, failures)
            return False
        return self._written(queue_config, "Update", obj, expect_version(self.informers[kind], out), expectations)

    def _written(
        self, queue_config: Mapping[str, Any], action: str, obj: Mapping[str, Any], expect: Expect, expectations: list[Expect]
    ) -> bool:
        """Count and record a successful write; the next pass waits for ``expect``."""
        self.stats.count_kueue(action.lower(), object_key(obj)[0])
        self._event(queue_config, action, obj)
        expectations.append(expect)
        return True

    def _event(self, queue_config: Mapping[str, Any], action: str, obj: Mapping[str, Any], error: Any = None) -> None:
        ev = sync_event(action, obj, error)
        self.recorder.event(queue_config, ev.type, ev.reason, ev.message)

    def _fail(self, queue_config: Mapping[str, Any], action: str, obj: Mapping[str, Any], err: ApiError, failures: dict) -> None:
        text = error_text(err)
        failures[object_key(obj)] = f"{action.lower()} failed: {text}"
        self._event(queue_config, action, obj, text)
        log.warning("kueue sync write failed", extra={"action": action, "object": key_str(object_key(obj)), "error": text})
