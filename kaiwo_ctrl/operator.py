"""Wires the Kaiwo reconcilers onto a runtime Manager.

This is the only module that knows both the runtime and the domain: each
domain package exposes ``setup(mgr, ...)`` which asks the manager's cache for
the informers it needs and registers its controllers. ``kaiwo-ctrl run``
calls :func:`build_operator`.
"""

from __future__ import annotations

import logging
from typing import Any

from kaiwo_ctrl.runtime.manager import Manager
from kaiwo_ctrl.settings import ensure_config

log = logging.getLogger("kaiwo_ctrl.operator")


async def build_operator(
    mgr: Manager, *, workers: int = 16, tracer: Any = None, demo: bool = False, webhooks: Any = None
) -> Any:
    """Register everything; returns the webhook server (``None`` without
    ``webhooks`` options), which the caller starts and stops around ``mgr.run``."""
    if demo:
        from kaiwo_ctrl.demo import add_demo_controller

        add_demo_controller(mgr, tracer=tracer)
        return None
    await ensure_config(mgr.client)
    from kaiwo_ctrl.queues import controller as queues
    from kaiwo_ctrl.workloads import controller as workloads

    queues.setup(mgr, tracer=tracer)
    workloads.setup(mgr, workers=workers, tracer=tracer)
    from kaiwo_ctrl.monitoring import setup as monitoring_setup

    monitoring_setup(mgr)  # no-op unless RESOURCE_MONITORING_ENABLED=true; bad env fails start-up
    if webhooks is None:
        return None
    from kaiwo_ctrl.webhooks import setup as webhooks_setup

    return webhooks_setup(mgr, webhooks)
