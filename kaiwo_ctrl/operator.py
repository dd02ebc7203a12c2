"""Wires the Kaiwo reconcilers onto a runtime Manager.

This is the only module that knows both the runtime and the domain: it asks
the manager's cache for the informers each reconciler needs and registers
the controllers. ``kaiwo-ctrl run`` calls :func:`build_operator`.
"""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.runtime.manager import Manager


async def build_operator(mgr: Manager, *, workers: int = 16, tracer: Any = None, demo: bool = False) -> None:
    if demo:
        from kaiwo_ctrl.demo import add_demo_controller

        add_demo_controller(mgr, tracer=tracer)
        return
