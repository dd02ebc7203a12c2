"""Early termination: a TERMINATING workload is written TERMINATED first, then
the children its kind marks ``terminate`` are deleted (foreground, UID
guarded), the main objects first so nothing re-creates what follows."""

from __future__ import annotations

import logging
from datetime import datetime

from kaiwo_ctrl.runtime.cache.store import OWNER_UID_INDEX
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta

from ..base.observed import ObservedChildren
from ..base.world import World
from ..kinds import CHILD_RESOURCES, TERMINATION_KINDS, WorkloadKind
from ..observe.drift import is_controlled_by
from ..observe.status import observe
from .caches import SharedCaches
from .statuswrite import StatusWriter

log = logging.getLogger("kaiwo_ctrl.workloads.reconcile.termination")


class Terminator:
    def __init__(self, shared: SharedCaches, kind: WorkloadKind, writer: StatusWriter) -> None:
        self.shared, self.kind, self.writer = shared, kind, writer
        #: the child kinds this kind terminates
        self.kinds = frozenset(c.kind for c in kind.children if c.terminate)

    async def terminate(self, raw: dict, world: World, now: datetime) -> None:
        """Write TERMINATED, then delete the controlled children."""
        new = observe(self.kind, raw, world, ObservedChildren(), None, now)
        if new != (raw.get("status") or {}):
            raw = await self.writer.write(raw, new)
        if not await self.delete_children(raw):
            log.warning("terminated workload had no children to delete", extra={"object": raw["metadata"]["name"]})

    async def delete_children(self, raw: dict, quiet: bool = False) -> int:
        """Delete every child this workload controls of a terminated kind; the
        number deleted. ``quiet``: finishing what an earlier pass cut short."""
        uid = raw["metadata"].get("uid") or ""
        n = 0
        for kind in TERMINATION_KINDS:
            if kind not in self.kinds:
                continue
            for obj in self.shared.children[kind].by_index(OWNER_UID_INDEX, uid):
                m = _meta(obj)
                if not is_controlled_by(obj, uid) or m.get("deletionTimestamp"):
                    continue
                await self.shared.mgr.client.delete(
                    CHILD_RESOURCES[kind], m["name"], m.get("namespace"), propagation="Foreground", uid=m.get("uid")
                )
                n += 1
        if n and quiet:
            log.info("deleted leftover children of a terminated workload", extra={"count": n})
        return n
