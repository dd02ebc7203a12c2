"""Objects an informer leaves out of its cache.

An object nested too deeply to decode, or to encode again (see deepjson.py),
must not fail the list or watch it arrives in: it is left out, and

* logged once per object generation (resourceVersion for kinds without
  one), with its namespace and name;
* counted in ``informer_skipped_objects_total{kind}`` (once per generation);
* dropped from the cache if an earlier version was there (handlers get a
  delete: the object as they knew it is no longer what the server holds);
* offered to handlers that define ``on_undecodable(stub, path)``, so the
  owner of the kind can report it (the stub is the object with its deep
  values replaced by ``null``; ``path`` names the field that goes too deep).
"""

from __future__ import annotations

import logging
from typing import Any

from kaiwo_ctrl.runtime.api.deepjson import Undecodable, event_stub
from kaiwo_ctrl.runtime.cache.informerapi import call_safely
from kaiwo_ctrl.runtime.cache.store import object_key

log = logging.getLogger("kaiwo_ctrl.runtime.cache.informer")


class SkippedObjects:
    def __init__(self, informer: Any) -> None:  # the Informer (typed loosely: it imports this module)
        self.informer = informer
        #: key -> uid/generation last skipped (logged and counted once)
        self.seen: dict[str, str] = {}

    def listed(self, info: Undecodable) -> None:
        """An item of a list (the list's replace drops any cached version)."""
        self._skip(info, dropped=False)

    def event(self, info: Undecodable) -> None:
        """A watch event whose object is too deep."""
        typ, obj = event_stub(info)
        self._skip(obj, dropped=True, deleted=typ == "DELETED")

    def cleared(self, obj: dict[str, Any]) -> None:
        """A good version arrived: a later bad one is logged again."""
        if self.seen:
            self.seen.pop(object_key(obj), None)

    def _skip(self, info: Undecodable, dropped: bool, deleted: bool = False) -> None:
        meta = info.stub.get("metadata") or {}
        if not meta.get("name"):
            return
        inf, key = self.informer, object_key(info.stub)
        if dropped and (old := inf.store.delete(key)) is not None:
            inf._dispatch("on_delete", old, not deleted)
        if deleted:
            self.seen.pop(key, None)
            return
        # once per generation (a status write, e.g. the ERROR naming the field, makes no new one)
        version = f"{meta.get('uid')}/{meta.get('generation') or meta.get('resourceVersion')}"
        if self.seen.get(key) == version:
            return
        self.seen[key] = version
        log.error("object left out of the cache: nested too deeply to decode or encode",
                  extra={"kind": inf.name, "namespace": meta.get("namespace") or "", "object": meta["name"],
                         "field": info.path, "depth": info.depth})
        if (count := getattr(inf.metrics, "informer_skipped", None)) is not None:
            count(inf.name)
        for reg in list(inf._handlers):
            fn = getattr(reg.handler, "on_undecodable", None)
            if fn is not None:
                call_safely(fn, info.stub, info.path)
