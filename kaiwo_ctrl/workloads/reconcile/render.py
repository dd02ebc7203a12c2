"""``kaiwo-ctrl render``: the children the operator would create for the
KaiwoJob/KaiwoService documents of a file, without a cluster."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from kaiwo_ctrl.queues.nodepools import desired_node_labels, discover, exclude_control_plane_setting
from kaiwo_ctrl.runtime.objects.ownership import RENDER_UID

from ..base.kaiwoobject import KINDS
from ..base.world import World
from ..builders.validation import SpecError
from .desired import desired_children


class RenderError(ValueError):
    def __init__(self, name: str, error: SpecError):
        super().__init__(f"{name}: {error}")
        self.name = name
        self.error = error


def as_discovered(nodes: Iterable[Mapping[str, Any]], config: Mapping[str, Any] | None) -> list[dict]:
    """Offline Nodes labelled as the operator's node-pool discovery labels them in
    a cluster (``kaiwo/nodepool``, ...), where a label is missing: a nodes file
    describes the hardware, and the GPU maths reads the pool labels. A label the
    file sets is kept."""
    out = [copy.deepcopy(dict(n)) for n in nodes if isinstance(n, Mapping)]
    by_name = {(n.get("metadata") or {}).get("name", ""): n for n in out}
    for pool in discover(out, exclude_control_plane_setting(config)):
        for name in pool.nodes:
            meta = by_name[name].setdefault("metadata", {})
            meta["labels"] = {**desired_node_labels(pool), **(meta.get("labels") or {})}
    return out


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
    across replicas; given Nodes count as described (see :func:`as_discovered`).
    Raises :class:`RenderError` naming the object and field of
    the first invalid spec."""
    world = World.from_dicts(
        config=config,
        nodes=None if nodes is None else as_discovered(nodes, config),
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
