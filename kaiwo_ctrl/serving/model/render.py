"""``kaiwo-ctrl render model.yaml --model-config F``: the objects the Model
controller would create, without a cluster: server Pods (as many as the
replicas the controller would keep, at least one), the files ConfigMap, and
with a cache profile the shared PVC and the loader Job. An AIMNamespaceConfig
in the same input supplies credentials and pull secrets to the Models of its
namespace."""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from pydantic import ValidationError

from api.kubeai.v1 import Model
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from kaiwo_ctrl.runtime.objects.ownership import RENDER_UID, set_controller_reference

from kaiwo_ctrl.aim.effective import effective_by_namespace

from kaiwo_ctrl.serving.model.admission import model_queue, queue_labels
from kaiwo_ctrl.serving.model.cache import desired_pvc, loader_job
from kaiwo_ctrl.serving.model.config import SystemConfig
from kaiwo_ctrl.serving.model.modelfields import bounded_replicas
from kaiwo_ctrl.serving.model.files import desired_configmap
from kaiwo_ctrl.serving.model.pods import build_pod


class RenderError(ValueError):
    pass


def _normalise(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The Model as the API server would store it (defaults applied), validated."""
    item = copy.deepcopy(dict(doc))
    meta = item.setdefault("metadata", {})
    meta.setdefault("uid", RENDER_UID)
    meta.setdefault("namespace", "default")
    try:
        out = Model.model_validate(item).to_k8s()
    except ValidationError as e:
        raise RenderError(f"Model/{meta.get('name')}: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}") from None
    out["metadata"] = meta
    return out


def _namespace_configs(docs: list[Any]) -> dict[str, dict[str, Any]]:
    """Namespace -> effective AIMNamespaceConfig among the documents (namespace defaults to ``default``)."""
    configs = []
    for doc in docs:
        if isinstance(doc, Mapping) and doc.get("kind") == "AIMNamespaceConfig":
            meta = {"namespace": "default", **(doc.get("metadata") or {})}
            configs.append({**doc, "metadata": meta})
    return {ns: dict(c) for ns, c in effective_by_namespace(configs).items()}


def render(docs: Iterable[Mapping[str, Any]], config: SystemConfig, note: TextIO = sys.stderr) -> list[dict[str, Any]]:
    """The objects for every Model among ``docs``; an AIMNamespaceConfig among
    them applies to the Models of its namespace as it would in the cluster."""
    docs = list(docs)
    ns_configs = _namespace_configs(docs)
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, Mapping) or doc.get("kind") != "Model":
            continue
        model = _normalise(doc)
        meta, spec = model["metadata"], model.get("spec") or {}
        try:
            # the queue a Model names itself (KaiwoConfig's default is the cluster's, unknown here)
            queue = model_queue(model, None)
            desired = build_pod(model, config, ns_configs.get(meta["namespace"]), queue_labels(model, queue) if queue else None)
        except FieldError as e:
            raise RenderError(f"Model/{meta['name']}: {e}") from None
        cm = desired_configmap(model)
        if cm is not None:
            set_controller_reference(cm, model, owner_namespaced=True)
            out.append(cm)
        if spec.get("cacheProfile"):
            out.append(desired_pvc(meta["namespace"], spec["cacheProfile"], config.cache_profiles[spec["cacheProfile"]]))
            out.append(loader_job(model, config, ns_configs.get(meta["namespace"])))
        bounded = bounded_replicas(spec)
        replicas = bounded if bounded is not None else (spec.get("replicas") or 0)
        if replicas == 0:
            print(f"# Model/{meta['name']}: 0 replicas; showing the Pod it would create at 1", file=note)
        for _ in range(max(replicas, 1)):
            pod = copy.deepcopy(desired.pod)
            set_controller_reference(pod, model, owner_namespaced=True)
            out.append(pod)
    return out
