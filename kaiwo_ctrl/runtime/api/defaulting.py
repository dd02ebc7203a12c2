"""Structural defaulting: what the API server adds to an object from its CRD schema.

A controller that compares the spec it wants with the stored one must compare
like with like: the stored object carries every ``default`` of the installed
CRD's OpenAPI schema, the wanted one does not. :func:`apply_defaults` fills the
wanted object the way the API server does (a missing property with a
``default`` gets a copy of it, and defaulting then continues inside that copy;
``items`` and ``additionalProperties`` schemas apply to every element), so a
comparison afterwards sees only real differences, whichever CRD version, ours
or another operator's, is installed.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError, Client, Resource
from kaiwo_ctrl.runtime.api.resources import CRDS

log = logging.getLogger("kaiwo_ctrl.runtime.api.defaulting")


def apply_defaults(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """A copy of ``value`` with the schema's defaults filled in (``value`` is not changed)."""
    return _default(copy.deepcopy(value), schema or {})


def _default(value: Any, schema: Mapping[str, Any]) -> Any:
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            elif value.get(name, 0) is None and "default" in sub and not sub.get("nullable"):
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = _default(value[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name in value:
                if name not in props:
                    value[name] = _default(value[name], extra)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                value[i] = _default(item, items)
    return value


def crd_version_schema(crd: Mapping[str, Any], version: str) -> Mapping[str, Any] | None:
    """The ``openAPIV3Schema`` of ``version`` in a CustomResourceDefinition object."""
    for v in (crd.get("spec") or {}).get("versions") or ():
        if v.get("name") == version:
            return ((v.get("schema") or {}).get("openAPIV3Schema")) or None
    return None


async def installed_schema(client: Client, resource: Resource) -> Mapping[str, Any] | None:
    """The installed CRD's schema for ``resource`` (its version), or ``None`` if unreadable."""
    try:
        crd = await client.get(CRDS, f"{resource.plural}.{resource.group}")
    except ApiError as e:
        log.warning("CRD schema not readable; comparing without its defaults",
                    extra={"crd": f"{resource.plural}.{resource.group}", "error": str(e)[:300]})
        return None
    return crd_version_schema(crd, resource.version)
