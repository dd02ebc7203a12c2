"""One ``inference.networking.k8s.io/v1`` InferencePool per Model (opt-in).

With ``KaiwoConfig.spec.models.inferencePools: true`` every Model gets an
InferencePool of the same name and namespace, controlled by the Model (so
garbage collection removes it with the Model), that selects the Model's
server Pods by the labels the Model controller puts on them (``app: model``,
``model: <name>``) on the server port. A Gateway whose implementation runs the
Inference Extension's endpoint picker (or llm-d's) can then route an HTTPRoute
to the pool.

The API requires an endpoint picker reference: by default the Service
``<model>-epp`` on port 9002 (the names the Inference Extension's pool chart
gives its picker); the Model's annotation
``kaiwo.silogen.ai/endpoint-picker: <service>[:<port>]`` names another one.
A malformed annotation is reported as a Warning event naming it and the pool
is left as it is.

Turning the key off deletes the pools this controller made; a pool of the
same name that another party made is never touched (a Warning event says so).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from kaiwo_ctrl.kinds import INFERENCEPOOLS, MODELS
from kaiwo_ctrl.runtime.api.client import ApiError
from kaiwo_ctrl.runtime.control.controller import Result
from kaiwo_ctrl.runtime.objects.diff import contains
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.objects.ownership import controller_of, set_controller_reference
from kaiwo_ctrl.runtime.api.resources import served as kinds_served
from kaiwo_ctrl.settings import settings_for

from kaiwo_ctrl.serving.model.engines import PORT
from kaiwo_ctrl.serving.podcontract import LABEL_APP, LABEL_MODEL

log = logging.getLogger("kaiwo_ctrl.serving.inferencepool")

ANNOTATION_PICKER = "kaiwo.silogen.ai/endpoint-picker"
PICKER_PORT = 9002
_PICKER = re.compile(r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)(?::(\d{1,5}))?$")


class PickerError(ValueError):
    """The endpoint-picker annotation is malformed (the message names it)."""


def endpoint_picker(model: dict[str, Any]) -> dict[str, Any]:
    """``spec.endpointPickerRef`` with the API's defaults written out (so a read-back compares equal)."""
    meta = model["metadata"]
    raw = (meta.get("annotations") or {}).get(ANNOTATION_PICKER)
    name, port = f"{meta['name']}-epp"[:63].rstrip("-"), PICKER_PORT
    if raw is not None:
        m = _PICKER.match(raw)
        if not m or not 0 < int(m.group(3) or PICKER_PORT) < 65536:
            raise PickerError(f"annotation {ANNOTATION_PICKER}: {raw[:128]!r} is not <service>[:<port>]")
        name, port = m.group(1), int(m.group(3) or PICKER_PORT)
    return {"group": "", "kind": "Service", "name": name, "port": {"number": port}, "failureMode": "FailClose"}


def desired_pool(model: dict[str, Any]) -> dict[str, Any]:
    """The Model's InferencePool (pure)."""
    meta = model["metadata"]
    pool = {
        "apiVersion": INFERENCEPOOLS.api_version,
        "kind": INFERENCEPOOLS.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace", "default"),
            "labels": {"app.kubernetes.io/managed-by": "kaiwo-ctrl", LABEL_MODEL: meta["name"]},
        },
        "spec": {
            "selector": {"matchLabels": {LABEL_APP: "model", LABEL_MODEL: meta["name"]}},
            "targetPorts": [{"number": PORT}],
            "endpointPickerRef": endpoint_picker(model),
        },
    }
    set_controller_reference(pool, model, owner_namespaced=True)
    return pool


def up_to_date(have: dict[str, Any], want: dict[str, Any]) -> bool:
    hs, ws = have.get("spec") or {}, want["spec"]
    return (
        hs.get("selector") == ws["selector"]
        and hs.get("targetPorts") == ws["targetPorts"]
        and contains(hs.get("endpointPickerRef") or {}, ws["endpointPickerRef"])
        and contains(have.get("metadata") or {}, {"labels": want["metadata"]["labels"]})
    )


class PoolReconciler:
    def __init__(self, mgr: Manager) -> None:
        self.client = mgr.client
        self.settings = settings_for(mgr)
        self.models = mgr.cache.informer(MODELS)
        self.pools = mgr.cache.informer(INFERENCEPOOLS)
        self.events = mgr.recorder.for_component("kaiwo-ctrl-models")

    def enabled(self) -> bool:
        spec = (self.settings.raw() or {}).get("spec") or {}
        return bool((spec.get("models") or {}).get("inferencePools"))

    async def reconcile(self, req: Request) -> Result | None:
        model = self.models.get(req.name, req.namespace)
        have = self.pools.get(req.name, req.namespace)
        if model is None or model["metadata"].get("deletionTimestamp"):
            return None  # the garbage collector deletes a pool with its Model
        uid = model["metadata"].get("uid")
        mine = have is not None and (controller_of(have) or {}).get("uid") == uid
        if not self.enabled():
            if mine and have is not None:
                await self._delete(have)
            return None
        try:
            want = desired_pool(model)
        except PickerError as e:
            self.events.warning(model, "InvalidEndpointPicker", str(e))
            return None
        if have is None:
            await self.client.create(INFERENCEPOOLS, want)
            self.events.normal(model, "InferencePoolCreated", f"created InferencePool {req.name}")
        elif not mine:
            self.events.warning(model, "InferencePoolTaken", f"InferencePool {req.name} exists and is not this Model's")
        elif not up_to_date(have, want):
            body = {**have, "spec": {**(have.get("spec") or {}), **want["spec"]}}
            body["metadata"] = {**have["metadata"], "labels": {**(have["metadata"].get("labels") or {}), **want["metadata"]["labels"]}}
            await self.client.replace(INFERENCEPOOLS, body)
        return None

    async def _delete(self, pool: dict[str, Any]) -> None:
        meta = pool["metadata"]
        try:
            await self.client.delete(INFERENCEPOOLS, meta["name"], meta.get("namespace"), uid=meta.get("uid"))
        except ApiError as e:
            if not e.not_found:
                raise

    def requests(self, _obj: Any = None) -> list[Request]:
        return [Request(m["metadata"].get("namespace", ""), m["metadata"]["name"]) for m in self.models.list()]


async def served(mgr: Manager) -> bool:
    """Whether the cluster serves InferencePool (the Inference Extension's CRD is installed)."""
    return await kinds_served(mgr.client, INFERENCEPOOLS)


def setup(mgr: Manager) -> PoolReconciler:
    rec = PoolReconciler(mgr)
    c = mgr.new_controller("model-inferencepool", rec.reconcile, workers=2)
    c.for_(rec.models)
    c.owns(rec.pools, "kubeai.org", "Model")
    c.watches(rec.settings.informer, rec.requests)
    return rec
