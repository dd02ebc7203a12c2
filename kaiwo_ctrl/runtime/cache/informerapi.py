"""What an informer's users and its loop share: the handler protocol, a
handler's registration, the metrics hook, the reflector's backoff and the
streaming list's end marker (:mod:`kaiwo_ctrl.runtime.cache.informer` runs them)."""

from __future__ import annotations

import random
import time
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kaiwo_ctrl.runtime.cache.store import Obj


#: marks the bookmark that ends a streaming list's initial events
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def initial_events_end(ev: Mapping[str, Any]) -> str | None:
    """The resourceVersion a streaming list's end bookmark carries; None for
    any other event."""
    meta = (ev.get("object") or {}).get("metadata") or {}
    if ev.get("type") == "BOOKMARK" and (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
        return str(meta.get("resourceVersion", ""))
    return None


class WatchListUnsupported(Exception):
    """The server refused or ignored a streaming list (``sendInitialEvents``)."""


class EventHandler(Protocol):
    def on_add(self, obj: Obj, initial: bool) -> None: ...

    def on_update(self, old: Obj, new: Obj) -> None: ...

    def on_delete(self, obj: Obj, tombstone: bool) -> None: ...


@dataclass
class Registration:
    handler: EventHandler
    synced: bool = False


class InformerMetricsHook(Protocol):
    def informer_event(self, kind: str, event_type: str) -> None: ...

    def informer_objects(self, kind: str, count: int) -> None: ...

    def informer_relist(self, kind: str, reason: str) -> None: ...

    def informer_watch_restart(self, kind: str, reason: str) -> None: ...


class Backoff:
    """Exponential backoff with jitter, reset after a healthy interval."""

    def __init__(self, initial: float = 0.8, factor: float = 2.0, cap: float = 30.0, reset_after: float = 120.0, jitter: float = 1.0):
        self.initial, self.factor, self.cap, self.reset_after, self.jitter = initial, factor, cap, reset_after, jitter
        self._current = initial
        self._last_failure = 0.0

    def next(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        if self._last_failure and now - self._last_failure > self.reset_after:
            self._current = self.initial
        self._last_failure = now
        delay = self._current * (1 + random.random() * self.jitter)
        self._current = min(self._current * self.factor, self.cap)
        return min(delay, self.cap * (1 + self.jitter))


def call_safely(fn: Callable[..., None], *args: Any) -> None:
    """Call an event handler; one that raises is logged and must not stop the informer."""
    try:
        fn(*args)
    except Exception:
        logging.getLogger("kaiwo_ctrl.runtime.cache.informer").exception("event handler failed")
