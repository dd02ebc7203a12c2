"""Event reasons and messages for the queue-config sync, emitted on the
KaiwoQueueConfig by the reconciler after each write.

Success (Normal): reason ``KaiwoQueueConfig<Kind><Action>d``, message
``<action>d <target> <namespace>/<name>`` (``created resource flavor /foo``).
Failure (Warning): reason ``KaiwoQueueConfig<Kind><Action>Failed``, message
``Failed to <action> <target> <namespace>/<name>: <error>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACTIONS = ("Create", "Update", "Delete", "Get", "OwnerReference")

_TARGETS = {
    "ResourceFlavor": "resource flavor",
    "ClusterQueue": "cluster queue",
    "LocalQueue": "local queue",
    "WorkloadPriorityClass": "workload priority class",
    "Topology": "topology",
}


@dataclass(frozen=True)
class SyncEvent:
    type: str  # "Normal" or "Warning"
    reason: str
    message: str


def _verb(action: str) -> str:
    return "set owner reference on" if action == "OwnerReference" else action.lower()


def sync_event(action: str, obj: Mapping[str, Any], error: Any = None) -> SyncEvent:
    """Event for one write (``action`` in :data:`ACTIONS`) on a Kueue object.

    Only Create, Update and Delete have a success event; Get and OwnerReference are
    reported only when they fail (``error`` given).
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    kind = obj.get("kind", "")
    meta = obj.get("metadata") or {}
    ref = f"{meta.get('namespace') or ''}/{meta.get('name', '')}"
    target = _TARGETS.get(kind, kind)
    if error is not None:
        return SyncEvent(
            "Warning", f"KaiwoQueueConfig{kind}{action}Failed", f"Failed to {_verb(action)} {target} {ref}: {error}"
        )
    if action not in ("Create", "Update", "Delete"):
        raise ValueError(f"{action} is only reported when it fails")
    return SyncEvent("Normal", f"KaiwoQueueConfig{kind}{action}d", f"{action.lower()}d {target} {ref}")
