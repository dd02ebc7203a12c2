"""A tenant's weight in a shared Model's fair queue (issue #41), set by an admin on its Namespace.

The annotation ``kaiwo.silogen.ai/serving-weight: "3"`` on a Namespace gives
that namespace's callers 3 releases for every 1 of a namespace without it,
while both have requests waiting. A weight is an integer in
``1..MAX_WEIGHT``; anything else (not a number, 0, negative, past the bound)
counts as 1 and is logged once per namespace and value. Only the Namespace
counts: the built-in ``admin`` and ``edit`` roles grant no write on
Namespaces, so a tenant cannot raise its own share, and a request says
nothing about it.

Without the annotation, the weight follows the quota the platform already
hands out: a namespace listed under a ClusterQueue of the KaiwoQueueConfig
``kaiwo`` (``spec.clusterQueues[].namespaces``) weighs that ClusterQueue's
Kueue fair-sharing weight (``spec.clusterQueues[].spec.fairSharing.weight``, a
quantity), rounded to a whole number in ``1..MAX_WEIGHT``; listed under
several, the largest. The annotation, where valid, wins.

Read from the process's shared Namespace informer (trimmed by
:func:`kaiwo_ctrl.settings.namespaces.trim_namespace`) and a KaiwoQueueConfig
informer (the proxy's role lists and watches both). A tenant that is not a
namespace (a user token's user, a client address with ``--proxy-auth none``)
weighs 1.
"""

from __future__ import annotations

import logging
from decimal import ROUND_HALF_UP
from typing import Any

from kaiwo_ctrl.kinds import KAIWOQUEUECONFIGS
from kaiwo_ctrl.runtime.api.resources import NAMESPACES
from kaiwo_ctrl.runtime.cache.cache import Cache
from kaiwo_ctrl.runtime.objects.quantity import QuantityError, parse_quantity
from kaiwo_ctrl.serving.routing.fairqueue import MAX_WEIGHT
from kaiwo_ctrl.settings.namespaces import SERVING_WEIGHT_ANNOTATION, trim_namespace

log = logging.getLogger("kaiwo_ctrl.serving.routing.weights")
MAX_LOGGED = 1024  # (namespace, value) pairs already logged as bad; forgotten all at once past it
QUEUE_CONFIG = "kaiwo"  # the one KaiwoQueueConfig (its CRD admits no other name)
MAX_QUEUE_NAMESPACES = 10_000  # namespaces read from one KaiwoQueueConfig at most (it is cluster input, bounded anyway)


def parse_weight(raw: object) -> int | None:
    """The weight an annotation value gives, or None when it is not an integer in ``1..MAX_WEIGHT``."""
    if not isinstance(raw, str) or not raw.strip().isdigit() or len(raw) > 8:
        return None
    w = int(raw.strip())
    return w if 1 <= w <= MAX_WEIGHT else None


def queue_weight(raw: object) -> int | None:
    """The weight a Kueue fair-sharing weight (a quantity) gives: rounded, in ``1..MAX_WEIGHT``; None when unset or
    not a quantity."""
    if raw is None or isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        return None
    try:
        q = parse_quantity(raw)
    except (QuantityError, ValueError, ArithmeticError):
        return None
    return max(1, min(MAX_WEIGHT, int(q.to_integral_value(ROUND_HALF_UP)) if q < MAX_WEIGHT else MAX_WEIGHT))


def queue_weights(config: Any) -> dict[str, int]:
    """Namespace -> weight from a KaiwoQueueConfig object (see the module docstring); malformed parts are skipped."""
    out: dict[str, int] = {}
    spec = config.get("spec") if isinstance(config, dict) else None
    queues = spec.get("clusterQueues") if isinstance(spec, dict) else None
    seen = 0
    for cq in queues if isinstance(queues, list) else ():
        if not isinstance(cq, dict) or not isinstance(cq.get("namespaces"), list):
            continue
        fair = (cq.get("spec") or {}).get("fairSharing") if isinstance(cq.get("spec"), dict) else None
        w = queue_weight(fair.get("weight")) if isinstance(fair, dict) else None
        if w is None:
            continue
        for ns in cq["namespaces"]:
            seen += 1
            if seen > MAX_QUEUE_NAMESPACES:
                return out
            if isinstance(ns, str) and w > out.get(ns, 0):
                out[ns] = w
    return out


class NamespaceWeights:
    """``weights(tenant)``: the tenant's weight (its Namespace's annotation, else its ClusterQueue's, else 1)."""

    def __init__(self, namespaces: Any, queue_configs: Any = None) -> None:
        self.namespaces = namespaces  # an Informer (or anything with get(name)) of Namespaces
        self.queue_configs = queue_configs  # an Informer (or anything with get(name)) of KaiwoQueueConfigs, or None
        self._logged: set[tuple[str, str]] = set()
        self._queues: tuple[str | None, dict[str, int]] = (None, {})  # (resourceVersion, namespace -> weight)

    @classmethod
    def from_cache(cls, cache: Cache) -> NamespaceWeights:
        return cls(cache.informer(NAMESPACES, transform=trim_namespace), cache.informer(KAIWOQUEUECONFIGS))

    def __call__(self, tenant: str) -> int:
        ns = self.namespaces.get(tenant) if tenant else None
        if ns is None:
            return 1
        raw = ((ns.get("metadata") or {}).get("annotations") or {}).get(SERVING_WEIGHT_ANNOTATION)
        if raw is not None:
            w = parse_weight(raw)
            if w is not None:
                return w
            self._bad(tenant, str(raw))
        return self._queue_weights().get(tenant, 1)

    def _queue_weights(self) -> dict[str, int]:
        config = self.queue_configs.get(QUEUE_CONFIG) if self.queue_configs is not None else None
        if config is None:
            return {}
        rv = (config.get("metadata") or {}).get("resourceVersion")
        if rv is None or rv != self._queues[0]:  # derived once per version of the config
            self._queues = (rv, queue_weights(config))
        return self._queues[1]

    def _bad(self, tenant: str, raw: str) -> None:
        key = (tenant, raw[:64])
        if key in self._logged:
            return
        if len(self._logged) >= MAX_LOGGED:
            self._logged.clear()
        self._logged.add(key)
        log.warning("namespace %s: annotation %s=%r is not an integer in 1..%d; its fair-queue weight is 1",
                    tenant, SERVING_WEIGHT_ANNOTATION, key[1], MAX_WEIGHT)
