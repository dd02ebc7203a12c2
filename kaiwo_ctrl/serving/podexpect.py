"""Read-your-writes for server Pods: what we created or deleted that the cache
does not show yet, so a reconcile that runs before the watch events arrive
never creates twice."""

from __future__ import annotations

import time
from collections.abc import Iterable


class PodExpectations:
    """Pods we created or deleted that the cache does not show yet (per Model)."""

    def __init__(self, ttl: float = 30.0) -> None:
        self.ttl = ttl
        self._m: dict[str, tuple[set[str], set[str], float]] = {}

    def expect(self, key: str, created: Iterable[str], deleted: Iterable[str]) -> None:
        c, d, _ = self._m.get(key, (set(), set(), 0.0))
        self._m[key] = (c | set(created), d | set(deleted), time.monotonic())

    def satisfied(self, key: str, pods: list[dict]) -> bool:
        entry = self._m.get(key)
        if entry is None:
            return True
        created, deleted, at = entry
        seen = {p["metadata"]["name"]: p for p in pods}
        pending_c = {n for n in created if n not in seen}
        pending_d = {n for n in deleted if n in seen and not seen[n]["metadata"].get("deletionTimestamp")}
        if (not pending_c and not pending_d) or time.monotonic() - at > self.ttl:
            del self._m[key]
            return True
        self._m[key] = (pending_c, pending_d, at)
        return False

    def forget(self, key: str) -> None:
        self._m.pop(key, None)
