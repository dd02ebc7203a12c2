"""Wiring of the autoscaler onto a manager (leader-only runnable)."""

from __future__ import annotations

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.manager import Manager
from kaiwo_ctrl.runtime.resources import PODS
from kaiwo_ctrl.serving.autoscale.autoscaler import Autoscaler, AutoscalerConfig
from kaiwo_ctrl.serving.autoscale.peers import peer_addresses


def setup_autoscaler(
    mgr: Manager, config: AutoscalerConfig, *, peers: list[str] | None = None, peer_selector: str = "", peer_port: int = 8080
) -> Autoscaler:
    """``peers``: fixed metrics addresses; else Ready Pods matching ``peer_selector`` in the operator's namespace."""
    if peers:
        fixed = list(peers)

        def find() -> list[str]:
            return fixed
    else:
        pods = mgr.cache.informer(PODS, namespace=config.namespace, label_selector=peer_selector or None)

        def find() -> list[str]:
            return peer_addresses(pods.list(config.namespace), peer_port)

    scaler = Autoscaler(mgr.client, mgr.cache.informer(MODELS), find, config)
    mgr.add_leader_runnable("model-autoscaler", scaler.run)
    return scaler
