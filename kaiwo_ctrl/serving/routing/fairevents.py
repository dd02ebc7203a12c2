"""Saturation made visible on the Model (issue #41): an Event when its fair queue starts and when it empties.

A Model is reported saturated by a proxy replica while that replica holds any
of its requests in the fair queue (:mod:`.fairgate`): ``Warning Saturated``
when the first request waits, ``Normal SaturationCleared`` when the last one
has been released. One Event per transition, and at most one per
``min_interval`` seconds per Model (``--proxy-fair-event-interval``): a
transition inside the interval is reported when it ends, if the state still
differs from the last one reported, so a Model that flaps between the two
gets at most one Event per interval and ends on its true state. The Event is
on the Model (its namespace: the proxy's role may create Events in any
namespace, ``kaiwo_ctrl/rbac.py``) and names the proxy replica; it carries no
tenant, request or token. The per-tenant figures are the ``kaiwo_proxy_fair_*``
metrics.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

MAX_MODELS = 4096  # Models whose last reported state is kept (LRU)


class Recorder(Protocol):
    def normal(self, obj: Any, reason: str, message: str) -> None: ...
    def warning(self, obj: Any, reason: str, message: str) -> None: ...


class SaturationEvents:
    def __init__(self, recorder: Recorder, models: Any, min_interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.recorder, self.models, self.min_interval, self.clock = recorder, models, min_interval, clock
        self.host = socket.gethostname()
        self._reported: OrderedDict[tuple[str, str], tuple[bool, float]] = OrderedDict()  # state, when reported
        self._now: dict[tuple[str, str], bool] = {}  # the latest state, while it waits for the interval
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    def changed(self, key: tuple[str, str], saturated: bool) -> None:
        """The fair queue of Model ``key`` started (True) or emptied (False) in this replica."""
        self._now[key] = saturated
        state, at = self._reported.get(key, (False, -float("inf")))
        if state == saturated:
            return
        wait = at + self.min_interval - self.clock()
        if wait > 0:
            if key not in self._timers:
                self._timers[key] = asyncio.get_running_loop().call_later(wait, self._due, key)
            return
        self._report(key, saturated)

    def _due(self, key: tuple[str, str]) -> None:
        self._timers.pop(key, None)
        saturated = self._now.get(key, False)
        if self._reported.get(key, (False, 0.0))[0] != saturated:
            self._report(key, saturated)

    def _report(self, key: tuple[str, str], saturated: bool) -> None:
        self._reported[key] = (saturated, self.clock())
        self._reported.move_to_end(key)
        if len(self._reported) > MAX_MODELS:
            self._reported.popitem(last=False)
        if not saturated:
            self._now.pop(key, None)
        model = self.models.get(key[1], key[0])
        if model is None:
            return  # the Model is gone: no one to tell
        if saturated:
            self.recorder.warning(model, "Saturated", f"proxy {self.host}: no engine of the Model has room; its requests "
                                  "wait in per-tenant queues and are released in fair order")
        else:
            self.recorder.normal(model, "SaturationCleared", f"proxy {self.host}: the Model's engines have room again; "
                                 "requests go straight to them")

    def close(self) -> None:
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
