"""Wiring of the autoscaler onto a manager (leader-only runnable)."""

from __future__ import annotations

from collections.abc import Callable

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.api.resources import PODS
from kaiwo_ctrl.serving.autoscale.autoscaler import Autoscaler, AutoscalerConfig
from kaiwo_ctrl.serving.autoscale.peers import peer_addresses


def setup_autoscaler(
    mgr: Manager, config: AutoscalerConfig, *, peers: list[str] | None = None, peer_selector: str = "", peer_port: int = 8080,
    self_proxy: bool = False, engine_load: Callable[[], dict[str, float]] | None = None,
) -> Autoscaler:
    """``peers``: fixed metrics addresses; else Ready Pods matching ``peer_selector`` in the operator's namespace.

    With ``self_proxy`` (this process serves the proxy too) and no Pod found --
    e.g. an operator run outside the cluster -- the process scrapes itself.
    ``engine_load``: this process's engine scraper's per-Model load (see the package docstring).
    """
    if peers:
        fixed = list(peers)

        def find() -> list[str]:
            return fixed
    else:
        pods = mgr.cache.informer(PODS, namespace=config.namespace, label_selector=peer_selector or None)

        def find() -> list[str]:
            found = peer_addresses(pods.list(config.namespace), peer_port)
            if not found and self_proxy and "metrics" in mgr.bound:
                return [f"127.0.0.1:{mgr.bound['metrics']}"]
            return found

    scaler = Autoscaler(mgr.client, mgr.cache.informer(MODELS), find, config, engine_load)
    mgr.add_runnable("model-autoscaler", scaler.run, leader=True)
    return scaler
