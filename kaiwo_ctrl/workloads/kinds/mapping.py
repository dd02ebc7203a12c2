"""Map function: the pods of a KaiwoService (which it does not control) -> the KaiwoService."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta

from ..base.labels import LABEL_NAME, LABEL_RUN_ID, LABEL_TYPE, TYPE_SERVICE


def service_pod_owner(services: Any) -> Callable[[Mapping[str, Any]], Iterable[Request]]:
    """A KaiwoService pod -> its KaiwoService.

    The ``kaiwo.silogen.ai/name`` label is the KaiwoService's name when it fits
    a label value; a longer name is cut and hashed there, so the pod's
    ``kaiwo.silogen.ai/run-id`` (the KaiwoService's UID) decides, looked up in
    ``services`` (the KaiwoService informer).
    """

    def fn(obj: Mapping[str, Any]) -> Iterable[Request]:
        meta = _meta(obj)
        labels = meta.get("labels") or {}
        if labels.get(LABEL_TYPE) != TYPE_SERVICE or not labels.get(LABEL_NAME):
            return []
        ns, uid = meta.get("namespace") or "", labels.get(LABEL_RUN_ID)
        named = services.get(labels[LABEL_NAME], ns)
        if uid is None or (named is not None and _meta(named).get("uid") == uid):
            return [Request(ns, labels[LABEL_NAME])]
        return [Request(ns, _meta(s).get("name") or "") for s in services.list(ns) if _meta(s).get("uid") == uid]

    return fn
