"""Wires the Kaiwo reconcilers onto a runtime Manager.

This module, ``cli.py`` and ``serving/command.py`` (the proxy's wiring) are
where the runtime and the domain meet: each domain package exposes ``setup(mgr, ...)`` which asks the manager's cache for
the informers it needs and registers its controllers. ``kaiwo-ctrl run``
calls :func:`build_operator`.
"""

from __future__ import annotations

import logging
from typing import Any

from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.settings import ensure_config

log = logging.getLogger("kaiwo_ctrl.operator")


async def build_operator(
    mgr: Manager, *, workers: int = 16, tracer: Any = None, model_config: Any = None, webhooks: Any = None,
    adapter_limits: Any = None,
) -> Any:
    """Register everything on ``mgr``, the webhook server (with ``webhooks`` options) among its
    runnables; returns that server (``None`` without them)."""
    await ensure_config(mgr.client)
    from kaiwo_ctrl.queues import controller as queues
    from kaiwo_ctrl.workloads.reconcile import controller as workloads

    queues.setup(mgr, tracer=tracer)
    workloads.setup(mgr, workers=workers, tracer=tracer)
    from kaiwo_ctrl.aim import controller as aim

    # Credentials and pull secrets apply through the workload builders either way;
    # gateway exposure needs the Gateway API CRDs.
    if await aim.gateway_api_served(mgr):
        aim.setup(mgr, tracer=tracer)
    else:
        log.warning("Gateway API (httproutes, gateways, referencegrants) not served: AIMNamespaceConfig gateway exposure and status are off")
    from kaiwo_ctrl.monitoring import setup as monitoring_setup

    monitoring_setup(mgr)  # no-op unless RESOURCE_MONITORING_ENABLED=true; bad env fails start-up
    from kaiwo_ctrl.monitoring import read_reclaim_env
    from kaiwo_ctrl.monitoring.reclaimer import setup as reclaim_setup

    reclaim_setup(mgr, read_reclaim_env())  # no-op unless GPU_PREEMPTION_ENABLED=true; bad env fails start-up
    from kaiwo_ctrl.monitoring.state import setup as state_metrics_setup

    state_metrics_setup(mgr)  # kaiwo_workloads, kaiwo_model_replicas, ... read from the caches at scrape time
    from kaiwo_ctrl.serving.model import controller as serving
    from kaiwo_ctrl.serving.model.config import ConfigSource

    # KubeAI Models in every namespace; ``model_config`` is the --model-config file (None: built-in defaults)
    source = model_config if isinstance(model_config, ConfigSource) else ConfigSource(model_config)
    serving.setup(mgr, source, adapter_limits=adapter_limits)  # None: AdapterLimits' defaults
    from kaiwo_ctrl.serving import inferencepool

    # one InferencePool per Model (KaiwoConfig spec.models.inferencePools) needs the Inference Extension's CRD
    if await inferencepool.served(mgr):
        inferencepool.setup(mgr)
    else:
        log.info("InferencePool (inference.networking.k8s.io/v1) not served: KaiwoConfig spec.models.inferencePools has no effect")
    if webhooks is None:
        return None
    import dataclasses

    from kaiwo_ctrl.webhooks import setup as webhooks_setup
    from kaiwo_ctrl.webhooks.validate import profiles_of

    # Model resourceProfile/cacheProfile names are checked against the live model config
    return webhooks_setup(mgr, dataclasses.replace(webhooks, profiles=profiles_of(source)))
