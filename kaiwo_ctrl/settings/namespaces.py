"""The cached Namespace: one trim for every reader of the shared Namespace informer.

The operator and the proxy share one Namespace informer per process (the queue
config controller, the priority-class policy, the route fence, the proxy's fair
share weights), so one transform keeps what any of them reads: the name, the
identity (uid, resourceVersion), whether it is terminating, and the annotations
an admin sets on a Namespace for Kaiwo:

* ``kaiwo.silogen.ai/priority-classes`` (:mod:`.priority`);
* ``kaiwo.silogen.ai/serving-weight``: the namespace's weight in a shared
  Model's fair queue (``serving/routing/weights.py``).

Labels, other annotations, spec and status are dropped: a cluster's Namespaces
cost a few hundred bytes each in every process.
"""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.settings.priority import ANNOTATION as PRIORITY_ANNOTATION

SERVING_WEIGHT_ANNOTATION = "kaiwo.silogen.ai/serving-weight"
KEPT_ANNOTATIONS = (PRIORITY_ANNOTATION, SERVING_WEIGHT_ANNOTATION)


def trim_namespace(obj: dict) -> dict:
    """The cached Namespace (see the module docstring)."""
    m = obj.get("metadata") or {}
    keep: dict[str, Any] = {k: m[k] for k in ("name", "uid", "resourceVersion", "deletionTimestamp") if k in m}
    annotations = m.get("annotations") or {}
    kept = {k: annotations[k] for k in KEPT_ANNOTATIONS if k in annotations}
    if kept:
        keep["annotations"] = kept
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": keep}
