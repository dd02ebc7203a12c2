"""A tenant's weight in a shared Model's fair queue (issue #41), set by an admin on its Namespace.

The annotation ``kaiwo.silogen.ai/serving-weight: "3"`` on a Namespace gives
that namespace's callers 3 releases for every 1 of a namespace without it,
while both have requests waiting. A weight is an integer in
``1..MAX_WEIGHT``; anything else (not a number, 0, negative, past the bound)
counts as 1 and is logged once per namespace and value. Only the Namespace
counts: the built-in ``admin`` and ``edit`` roles grant no write on
Namespaces, so a tenant cannot raise its own share, and a request says
nothing about it.

Read from the process's shared Namespace informer (trimmed by
:func:`kaiwo_ctrl.settings.namespaces.trim_namespace`; the proxy's role lists
and watches Namespaces). A tenant that is not a namespace (a user token's user,
a client address with ``--proxy-auth none``) weighs 1.
"""

from __future__ import annotations

import logging
from typing import Any

from kaiwo_ctrl.runtime.api.resources import NAMESPACES
from kaiwo_ctrl.runtime.cache.cache import Cache
from kaiwo_ctrl.serving.routing.fairqueue import MAX_WEIGHT
from kaiwo_ctrl.settings.namespaces import SERVING_WEIGHT_ANNOTATION, trim_namespace

log = logging.getLogger("kaiwo_ctrl.serving.routing.weights")
MAX_LOGGED = 1024  # (namespace, value) pairs already logged as bad; forgotten all at once past it


def parse_weight(raw: object) -> int | None:
    """The weight an annotation value gives, or None when it is not an integer in ``1..MAX_WEIGHT``."""
    if not isinstance(raw, str) or not raw.strip().isdigit() or len(raw) > 8:
        return None
    w = int(raw.strip())
    return w if 1 <= w <= MAX_WEIGHT else None


class NamespaceWeights:
    """``weights(tenant)``: the tenant's weight (1 unless its Namespace says otherwise)."""

    def __init__(self, namespaces: Any) -> None:
        self.namespaces = namespaces  # an Informer (or anything with get(name)) of Namespaces
        self._logged: set[tuple[str, str]] = set()

    @classmethod
    def from_cache(cls, cache: Cache) -> NamespaceWeights:
        return cls(cache.informer(NAMESPACES, transform=trim_namespace))

    def __call__(self, tenant: str) -> int:
        ns = self.namespaces.get(tenant) if tenant else None
        if ns is None:
            return 1
        raw = ((ns.get("metadata") or {}).get("annotations") or {}).get(SERVING_WEIGHT_ANNOTATION)
        if raw is None:
            return 1
        w = parse_weight(raw)
        if w is None:
            self._bad(tenant, str(raw))
            return 1
        return w

    def _bad(self, tenant: str, raw: str) -> None:
        key = (tenant, raw[:64])
        if key in self._logged:
            return
        if len(self._logged) >= MAX_LOGGED:
            self._logged.clear()
        self._logged.add(key)
        log.warning("namespace %s: annotation %s=%r is not an integer in 1..%d; its fair-queue weight is 1",
                    tenant, SERVING_WEIGHT_ANNOTATION, key[1], MAX_WEIGHT)
