"""KubeAI's ``proxy.mode`` (0.23, #655/#670): what the Model controller does in each mode.

``internal`` (the default): this process serves the proxy and runs the
autoscaler; a Model gets no Service of its own.

``external``: something outside the operator (a Gateway, the Inference
Extension) routes requests, so this process runs no proxy and no autoscaler
(:mod:`kaiwo_ctrl.serving.command`), and each Model gets a headless Service
selecting its server Pods, named as KubeAI names it: ``<model>-<first 6
characters of its UID>``, port 8000 to the Pods' port 8000, owned by the Model.
Switching back to ``internal`` deletes those Services, as KubeAI does.

Nothing scales a Model from zero in ``external`` mode: a Model under the
autoscaler (not ``autoscalingDisabled``) with ``minReplicas`` 0 gets the
condition ``ScaleFromZero=False/NoProxy`` and one Warning event when it appears
(KubeAI only logs a warning), and the condition goes when the Model no longer
relies on it or the mode is ``internal``.

The mode is read once, at start-up: the proxy and the autoscaler are started or
not then. A later edit of ``proxy.mode`` in the config file is logged and takes
effect at the next restart.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError
from kaiwo_ctrl.runtime.api.resources import SERVICES
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.objects.ownership import set_controller_reference
from kaiwo_ctrl.runtime.observe.conditions import remove_condition, set_condition

from kaiwo_ctrl.serving.model.config import ConfigSource, SystemConfig
from kaiwo_ctrl.serving.model.engines import PORT
from kaiwo_ctrl.serving.podcontract import APP_MODEL, LABEL_APP, LABEL_MODEL

log = logging.getLogger("kaiwo_ctrl.serving.model.external")

SCALE_FROM_ZERO = "ScaleFromZero"
NO_PROXY_MESSAGE = (
    "proxy.mode is external: no proxy in kaiwo-ctrl holds requests for this Model or scales it from zero, "
    "and no autoscaler changes its replicas; with minReplicas 0 it stays at 0 replicas until someone sets "
    "spec.replicas (set minReplicas to 1 or more to keep it serving)"
)
UID_CHARS = 6  # KubeAI: <model>-<uid[:6]>


def service_name(model: Mapping[str, Any]) -> str:
    meta = model["metadata"]
    return f"{meta['name']}-{str(meta.get('uid') or '')[:UID_CHARS]}"


def desired_service(model: Mapping[str, Any]) -> dict[str, Any]:
    """The headless Service of a Model (its owner reference is added by the caller)."""
    meta = model["metadata"]
    # our server Pods carry KubeAI 0.22's labels (app=model, model=<name>): the selector uses them
    selector = {LABEL_APP: APP_MODEL, LABEL_MODEL: meta["name"]}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(model), "namespace": meta.get("namespace"), "labels": dict(selector)},
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def relies_on_scale_from_zero(model: Mapping[str, Any]) -> bool:
    spec = model.get("spec") or {}
    return not spec.get("autoscalingDisabled") and not (spec.get("minReplicas") or 0)


def scale_from_zero_status(model: Mapping[str, Any], status: dict[str, Any], external: bool) -> dict[str, Any]:
    """``status`` with the ``ScaleFromZero`` condition set (external mode, a Model that
    relies on it) or removed; ``status`` is the caller's copy and is changed in place."""
    if external and relies_on_scale_from_zero(model):
        gen = model["metadata"].get("generation") or 0
        conds: list[dict[str, Any]] = status.setdefault("conditions", [])
        set_condition(conds, SCALE_FROM_ZERO, "False", "NoProxy", NO_PROXY_MESSAGE, gen, datetime.now(timezone.utc))
    elif status.get("conditions"):
        remove_condition(status["conditions"], SCALE_FROM_ZERO)
    return status


def _owned_by(obj: Mapping[str, Any], model: Mapping[str, Any]) -> bool:
    uid = model["metadata"].get("uid")
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("controller") and r.get("uid") == uid for r in refs)


class ExternalMode:
    """The Model controller's part of ``proxy.mode``: headless Services and the condition."""

    def __init__(self, mgr: Manager, source: ConfigSource, selector: str) -> None:
        self.client = mgr.client
        self.mode = source.current.proxy_mode  # fixed for this process's life (see the module doc)
        self.external = self.mode == "external"
        self.events = mgr.recorder.for_component("kaiwo-ctrl-models")
        self.services = mgr.cache.informer(SERVICES, label_selector=selector)
        source.listeners.append(self._config_changed)
        if self.external:
            log.info("proxy.mode external: no proxy and no autoscaler here; each Model gets a headless Service")

    def _config_changed(self, cfg: SystemConfig) -> None:
        if cfg.proxy_mode != self.mode:
            log.warning("proxy.mode changed in the model config; it takes effect at the next restart",
                        extra={"in_force": self.mode, "configured": cfg.proxy_mode})

    def status(self, model: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """The status to write, with the ``ScaleFromZero`` condition as the mode wants it;
        a Warning event when the condition appears."""
        had = any(c.get("type") == SCALE_FROM_ZERO for c in (model.get("status") or {}).get("conditions") or ())
        out = scale_from_zero_status(model, status, self.external)
        if not had and any(c.get("type") == SCALE_FROM_ZERO for c in out.get("conditions") or ()):
            self.events.warning(dict(model), "ScaleFromZeroUnavailable", NO_PROXY_MESSAGE)
        return out

    async def sync(self, model: dict[str, Any]) -> None:
        """Create (external) or delete (internal) the Model's headless Service; a Service of that
        name the Model does not control is left alone (and reported once per reconcile)."""
        meta = model["metadata"]
        ns, name = meta.get("namespace"), service_name(model)
        have = self.services.get(name, ns)
        if not self.external:
            if have is not None and _owned_by(have, model):
                await self.client.delete(SERVICES, name, ns, uid=have["metadata"].get("uid"))
            return
        if have is not None:
            if not _owned_by(have, model):
                self.events.warning(model, "ServiceNameTaken", f"Service {name} exists and is not this Model's; no headless Service")
            return
        want = desired_service(model)
        set_controller_reference(want, model, owner_namespaced=True)
        try:
            await self.client.create(SERVICES, want)
        except ApiError as e:
            if e.already_exists:
                return  # the cache lags; its event enqueues the Model again
            if e.invalid:  # e.g. a Model name too long for a Service name (63 characters)
                self.events.warning(model, "HeadlessServiceRejected", str(e)[:1024])
                return
            raise
        self.events.normal(model, "HeadlessServiceCreated", f"created headless Service {name} (proxy.mode external)")
