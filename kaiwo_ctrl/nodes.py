"""The one shared Node informer and the lean shape Nodes are cached in.

There is one informer per kind per manager and the first caller's transform
wins, so every controller that reads Nodes asks for them through
:func:`node_informer`. The transform keeps only what the operator reads, so a
cluster with 10k Nodes stays small in memory:

* ``metadata``: ``name``, ``uid``, ``resourceVersion``, ``labels``,
  ``deletionTimestamp``;
* ``spec``: ``unschedulable``, ``taints``;
* ``status``: ``capacity``, ``allocatable``.

Readers: node-pool discovery (labels, capacity, unschedulable, taints for the
GPU taint patch, resourceVersion for its optimistic write) and the workload
reconcilers (labels, capacity, allocatable, unschedulable, taints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.api.resources import NODES

_META_KEYS = ("name", "uid", "resourceVersion", "labels", "deletionTimestamp")
_SPEC_KEYS = ("unschedulable", "taints")
_STATUS_KEYS = ("capacity", "allocatable")


def _pick(section: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(section, Mapping):
        return {}
    return {k: section[k] for k in keys if section.get(k) is not None}


def NODES_TRANSFORM(obj: Mapping[str, Any]) -> dict[str, Any]:  # noqa: N802 - a constant-like shared function
    """Trim a Node to the fields the operator reads (see the module docstring)."""
    return {
        "apiVersion": obj.get("apiVersion", NODES.api_version),
        "kind": obj.get("kind", NODES.kind),
        "metadata": _pick(obj.get("metadata"), _META_KEYS),
        "spec": _pick(obj.get("spec"), _SPEC_KEYS),
        "status": _pick(obj.get("status"), _STATUS_KEYS),
    }


def node_informer(mgr: Manager) -> Informer:
    """The manager's shared Node informer, caching trimmed Nodes."""
    return mgr.cache.informer(NODES, transform=NODES_TRANSFORM)
