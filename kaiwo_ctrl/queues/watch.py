"""What the queue-config controller watches, and which events matter.

Every watched event maps to the one request, ``KaiwoQueueConfig/kaiwo``
(:func:`always_kaiwo`); the predicates drop events that cannot change what a
sync writes (Kueue's own status updates, node heartbeats, status writes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.objects.objpath import meta
from kaiwo_ctrl.runtime.control.predicate import FieldsChanged, Predicate

from .constants import QUEUE_CONFIG_NAME
from .nodepools import node_fingerprint

KAIWO_REQUEST = Request("", QUEUE_CONFIG_NAME)


def always_kaiwo(_obj: Any) -> Iterable[Request]:
    return (KAIWO_REQUEST,)


class NodeChanged(Predicate):
    """Node updates that matter to pools; creates and deletes always pass."""

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return node_fingerprint(old) != node_fingerprint(new)


class NamespaceComesOrGoes(Predicate):
    """A namespace appearing (or starting to terminate) can unblock or block its LocalQueues."""

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return meta(old).get("deletionTimestamp") != meta(new).get("deletionTimestamp")


class KueueObjectChanged(Predicate):
    """Kueue object events that can put it out of sync: create/delete, and updates of
    spec (generation), labels, annotations, owner references or deletion start;
    Kueue's own status updates are ignored."""

    _fields = FieldsChanged(
        lambda o: meta(o).get("generation"),
        lambda o: meta(o).get("labels"),
        lambda o: meta(o).get("annotations"),
        lambda o: meta(o).get("ownerReferences"),
        lambda o: meta(o).get("deletionTimestamp"),
        lambda o: (o.get("value"), o.get("description")),
    )

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return self._fields.update(old, new)


class SpecChanged(Predicate):
    """Updates that move ``metadata.generation`` or start deletion (not status writes)."""

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return (meta(old).get("generation"), meta(old).get("deletionTimestamp")) != (
            meta(new).get("generation"),
            meta(new).get("deletionTimestamp"),
        )
