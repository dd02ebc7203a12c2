"""``kaiwo-ctrl render``: the children the operator would create for the
KaiwoJob/KaiwoService documents of a file, without a cluster."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from .desired import desired_children
from .kaiwoobject import KINDS, RENDER_UID
from .validation import SpecError
from .world import World


class RenderError(ValueError):
    def __init__(self, name: str, error: SpecError):
        super().__init__(f"{name}: {error}")
        self.name = name
        self.error = error


def render(
    docs: Iterable[Mapping[str, Any]],
    nodes: list[dict] | None = None,
    config: dict | None = None,
    *,
    queue_config: dict | None = None,
    workload_priority_classes: Iterable[str] = (),
    priority_classes: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Children of every KaiwoJob/KaiwoService in ``docs`` (other kinds are
    skipped), as if downloads had succeeded. Objects without a UID get a fixed
    fake one; without a namespace, ``default``. ``nodes`` ``None`` means the
    cluster is unknown: GPU capacity is not checked and GPUs are not split
    across replicas. Raises :class:`RenderError` naming the object and field of
    the first invalid spec."""
    world = World.from_dicts(
        config=config,
        nodes=nodes,
        queue_config=queue_config,
        workload_priority_classes=workload_priority_classes,
        priority_classes=priority_classes,
    )
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, Mapping) or doc.get("kind") not in KINDS:
            continue
        item = copy.deepcopy(dict(doc))
        meta = item.setdefault("metadata", {})
        meta.setdefault("uid", RENDER_UID)
        meta.setdefault("namespace", "default")
        children = desired_children(item, world, download_succeeded=True)
        if isinstance(children, SpecError):
            raise RenderError(f"{item['kind']}/{meta.get('name')}", children)
        out.extend(children)
    return out
