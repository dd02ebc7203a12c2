"""Read-your-writes over informer caches ("expectations").

An informer cache shows our own write one watch event later. A reconcile that
runs in between would otherwise see the old object and write the same thing
again. This module is the runtime's one mechanism against that: a manager has
one store (``Manager.expectations``), and a controller of the manager that
needs read-your-writes uses it rather than keeping one of its own (others lean
on resourceVersion conflicts and AlreadyExists alone):

* :meth:`Expectations.wrote` records the object the API server returned for a
  write made over resourceVersion ``base_rv`` (``None`` for a create);
  :meth:`Expectations.view` answers that object instead of the cached copy
  while the cache still holds ``base_rv``, and drops the entry as soon as the
  cache shows anything else.
* :meth:`Expectations.expect_status` records a status write before it is sent
  (its watch event may arrive before the response);
  :meth:`Expectations.own_status_event` then recognises the update event that
  write produced, and :meth:`Expectations.echo_filter` is the predicate that
  drops it, so the controller need not reconcile its own echo.
* :meth:`Expectations.write_status` writes a status (a merge patch guarded
  by resourceVersion) and records it for read-your-writes (a controller's
  write to its own object also with :meth:`Expectations.expect_status`).
* :meth:`Expectations.expect_children` records children created or deleted
  for an owner (e.g. Pods with generated names, found through a label index
  rather than by name); :meth:`Expectations.children_seen` tells whether the
  cache shows all of them yet, so a reconcile that runs before their watch
  events arrive does not create or delete again.
* :func:`wait_observed` waits until a cache shows a write (for controllers
  that compute a plan from a whole cache listing).

Entries never leak: the store is bounded by entry count and by (estimated)
bytes, evicting the oldest first; entries older than ``ttl`` seconds are
ignored and pruned (the watch event never came, e.g. the object was deleted
again before we saw it); and :meth:`Expectations.pruner` returns an informer
handler that forgets an object (and its children's entry) when its delete
event arrives.

Defaults: 20,000 entries, 64 MiB, 30 s time to live.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

try:
    import orjson

    def _size(obj: Any) -> int:
        return len(orjson.dumps(obj))
except ImportError:  # pragma: no cover - orjson is a dependency
    import json

    def _size(obj: Any) -> int:
        return len(json.dumps(obj, default=str))


from kaiwo_ctrl.runtime.control.predicate import Predicate
from kaiwo_ctrl.runtime.objects.objpath import meta, rv

Key = tuple[str, str, str]
"""``(kind, namespace, name)``."""

DEFAULT_MAX_ENTRIES = 20_000
DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_TTL = 30.0

_OBJ, _STATUS, _CHILDREN = "obj", "status", "children"


class Expectations:
    """Bounded read-your-writes store (see the module documentation)."""

    def __init__(
        self,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl = ttl
        self.clock = clock
        # (slot, key) -> (base_rv, payload, size, recorded at); insertion order = age order
        self._m: dict[tuple[str, Key], tuple[str | None, Any, int, float]] = {}
        self.nbytes = 0

    # ------------------------------------------------------------- storage
    def _put(self, slot: str, key: Key, base_rv: str | None, payload: Any) -> None:
        k = (slot, key)
        self._drop(k)
        size = _size(payload) + 64
        self._m[k] = (base_rv, payload, size, self.clock())
        self.nbytes += size
        self._evict()

    def _drop(self, k: tuple[str, Key]) -> Any:
        entry = self._m.pop(k, None)
        if entry is not None:
            self.nbytes -= entry[2]
        return entry

    def _evict(self) -> None:
        now = self.clock()
        while self._m:
            k, (_, _, size, at) = next(iter(self._m.items()))
            if len(self._m) > self.max_entries or self.nbytes > self.max_bytes or now - at >= self.ttl:
                self._drop(k)
            else:
                break

    def _fresh(self, k: tuple[str, Key]) -> tuple[str | None, Any] | None:
        entry = self._m.get(k)
        if entry is None:
            return None
        if self.clock() - entry[3] >= self.ttl:
            self._drop(k)
            return None
        return entry[0], entry[1]

    # ------------------------------------------------------- written objects
    def wrote(self, key: Key, base_rv: str | None, obj: dict) -> None:
        """The API server answered ``obj`` for our write over ``base_rv``."""
        self._put(_OBJ, key, base_rv, obj)

    def view(self, key: Key, cached: dict | None) -> dict | None:
        """``cached``, or what we wrote while the cache still shows the version we wrote over."""
        if not self._m:
            return cached
        entry = self._fresh((_OBJ, key))
        if entry is None:
            return cached
        base_rv, obj = entry
        if rv(cached) == base_rv:
            return obj
        self._drop((_OBJ, key))
        return cached

    # ---------------------------------------------------------- status echoes
    def expect_status(self, key: Key, base_rv: str, status: Mapping[str, Any]) -> None:
        """A status write over ``base_rv`` is about to be sent."""
        self._put(_STATUS, key, base_rv, status)

    def cancel_status(self, key: Key) -> None:
        """The status write failed: no event will come."""
        self._drop((_STATUS, key))

    def own_status_event(self, key: Key, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Whether the update ``old -> new`` is exactly the echo of our expected
        status write (nothing else changed: generation, labels, annotations,
        deletion). The expectation is consumed either way."""
        entry = self._fresh((_STATUS, key))
        if entry is None:
            return False
        self._drop((_STATUS, key))
        base_rv, status = entry
        m_old, m_new = meta(old), meta(new)
        return (
            rv(old) == base_rv
            and new.get("status") == status
            and m_old.get("generation") == m_new.get("generation")
            and m_old.get("labels") == m_new.get("labels")
            and m_old.get("annotations") == m_new.get("annotations")
            and not m_new.get("deletionTimestamp")
        )

    def echo_filter(self, kind: str) -> Predicate:
        """A predicate for the watch of ``kind`` that drops the update event our
        own status write (``own=True``) produced: the pass that wrote it has
        already acted on that status."""
        return _NotOwnEcho(self, kind)

    # ---------------------------------------------------------------- children
    def expect_children(self, owner: Key, created: Iterable[str] = (), deleted: Iterable[str] = ()) -> None:
        """Children of ``owner`` were created or deleted (by name): until the
        cache shows each created one and no deleted one (or shows it being
        deleted), :meth:`children_seen` answers False. Adds to what is pending
        and restarts its time to live."""
        entry = self._fresh((_CHILDREN, owner))
        c, d = entry[1] if entry is not None else ((), ())
        new = (tuple(sorted({*c, *created})), tuple(sorted({*d, *deleted})))
        if new[0] or new[1]:
            self._put(_CHILDREN, owner, None, new)

    def children_seen(self, owner: Key, children: Iterable[Mapping[str, Any]]) -> bool:
        """Whether the cache, which lists ``children`` for ``owner``, shows every
        create and delete recorded with :meth:`expect_children` (True when none
        are pending or they expired). What it shows stops being pending."""
        k = (_CHILDREN, owner)
        entry = self._fresh(k)
        if entry is None:
            return True
        created, deleted = entry[1]
        seen = {meta(c).get("name"): c for c in children}
        pending_c = tuple(n for n in created if n not in seen)
        pending_d = tuple(n for n in deleted if n in seen and not meta(seen[n]).get("deletionTimestamp"))
        if not pending_c and not pending_d:
            self._drop(k)
            return True
        if (pending_c, pending_d) != (created, deleted):
            _, _, size, at = self._m[k]  # the size stays an upper bound
            self._m[k] = (None, (pending_c, pending_d), size, at)  # same age, same place
        return False

    # ------------------------------------------------------------ status writes
    async def write_status(
        self,
        key: Key,
        obj: Mapping[str, Any],
        status: Mapping[str, Any],
        send: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
        *,
        own: bool,
    ) -> dict[str, Any]:
        """Write a status: ``send`` gets a merge patch
        of the status subresource carrying the resourceVersion read from
        ``obj`` (the API server answers 409 when the object changed since) and
        the complete ``status``; the result is recorded for read-your-writes.
        ``own``: the write is the object's own controller's, so the update
        event it produces is recognised (:meth:`own_status_event`) and not
        reconciled again; another writer's change must be reconciled."""
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        patch = status_patch(rv, status)
        if own:
            # registered before the request: the watch event may arrive before the response
            self.expect_status(key, rv or "", status)
        try:
            result = await send(patch)
        except BaseException:
            if own:
                self.cancel_status(key)
            raise
        self.wrote(key, rv, result)
        return result

    # ----------------------------------------------------------------- pruning
    def forget(self, key: Key) -> None:
        """Drop everything recorded for ``key`` (its write, status echo and children)."""
        for slot in (_OBJ, _STATUS, _CHILDREN):
            self._drop((slot, key))

    def pruner(self, kind: str) -> _Pruner:
        """An informer handler forgetting objects of ``kind`` when they are deleted."""
        return _Pruner(self, kind)

    def __len__(self) -> int:
        return len(self._m)


def status_patch(resource_version: str | None, status: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch of a status subresource that replaces ``status`` and is
    refused (409) when the object is no longer at ``resource_version``."""
    return {"metadata": {"resourceVersion": resource_version}, "status": status}


class _Pruner:
    def __init__(self, owner: Expectations, kind: str) -> None:
        self.owner, self.kind = owner, kind

    def on_add(self, obj: Any, initial: bool) -> None:
        pass

    def on_update(self, old: Any, new: Any) -> None:
        pass

    def on_delete(self, obj: Any, tombstone: bool) -> None:
        m = meta(obj)
        self.owner.forget((self.kind, m.get("namespace") or "", m.get("name") or ""))


class _NotOwnEcho(Predicate):
    def __init__(self, owner: Expectations, kind: str) -> None:
        self.owner, self.kind = owner, kind

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        m = meta(new)
        return not self.owner.own_status_event((self.kind, m.get("namespace") or "", m.get("name") or ""), old, new)


def newer_or_same(written: Mapping[str, Any]) -> Callable[[Mapping[str, Any] | None], bool]:
    """A check that a cached object shows ``written`` or something after it (a
    different uid, or a resourceVersion not smaller; comparing resourceVersions
    is fine for waiting, never for correctness)."""
    m = meta(written)
    want_rv, want_uid = m.get("resourceVersion"), m.get("uid")

    def check(obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        if meta(obj).get("uid") != want_uid:
            return True
        try:
            return int(rv(obj) or 0) >= int(want_rv or 0)
        except ValueError:
            return rv(obj) == want_rv

    return check


async def wait_observed(
    pending: Sequence[tuple[Callable[[], Mapping[str, Any] | None], Callable[[Mapping[str, Any] | None], bool]]],
    timeout: float,
    interval: float = 0.02,
) -> bool:
    """Wait until every ``(read, check)`` pair holds (``read`` reads a cache);
    False when ``timeout`` seconds pass first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        pending = [(read, check) for read, check in pending if not check(read())]
        if not pending:
            return True
        if loop.time() > deadline:
            return False
        await asyncio.sleep(interval)
