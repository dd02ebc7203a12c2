"""Small offline counterparts of what the apiserver does with a CRD schema.

* :func:`structural_errors` lists violations of the structural-schema rules
  (every node typed unless int-or-string / preserve-unknown-fields, no $ref,
  no nullable without type, anyOf/allOf/oneOf/not only as value validation
  without types or defaults, no additionalProperties next to properties, ...).
* :func:`apply_defaults` fills ``default`` values the way the apiserver does
  on read and write (only inside objects that are present).
* :func:`prune` drops fields the schema does not know, like the apiserver.

They let tests check Python defaults against CRD defaults without a cluster.
"""

from __future__ import annotations

import copy
from typing import Any

_LOGIC_KEYS = ("anyOf", "allOf", "oneOf", "not")
_FORBIDDEN_IN_LOGIC = ("type", "default", "description", "additionalProperties", "nullable", "x-kubernetes-preserve-unknown-fields")


def structural_errors(schema: dict[str, Any], path: str = "") -> list[str]:
    errors: list[str] = []
    _check(schema, path or "<root>", errors, root=True)
    return errors


def _check(node: dict[str, Any], path: str, errors: list[str], root: bool = False) -> None:
    if not isinstance(node, dict):
        errors.append(f"{path}: schema node is not an object")
        return
    if "$ref" in node:
        errors.append(f"{path}: $ref is not allowed")
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    typ = node.get("type")
    if not typ and not preserve and not int_or_string:
        errors.append(f"{path}: missing type")
    if node.get("nullable") and not typ:
        errors.append(f"{path}: nullable without type")
    if typ == "object" and "properties" in node and "additionalProperties" in node:
        errors.append(f"{path}: properties and additionalProperties are mutually exclusive")
    if typ == "array" and "items" not in node:
        errors.append(f"{path}: array without items")
    if int_or_string:
        any_of = node.get("anyOf")
        if typ:
            errors.append(f"{path}: int-or-string must not set type")
        if any_of is not None and any_of != [{"type": "integer"}, {"type": "string"}]:
            errors.append(f"{path}: int-or-string anyOf must be [integer, string]")
    for key in _LOGIC_KEYS:
        if key in node and not (int_or_string and key == "anyOf"):
            branches = node[key] if isinstance(node[key], list) else [node[key]]
            for i, branch in enumerate(branches):
                for bad in _FORBIDDEN_IN_LOGIC:
                    if bad in branch:
                        errors.append(f"{path}.{key}[{i}]: {bad} not allowed inside {key}")
                if any(b.get("type") == "null" for b in branches if isinstance(b, dict)):
                    errors.append(f"{path}.{key}: null type (anyOf-null) is not allowed")
    if "default" in node and root:
        errors.append(f"{path}: default at the root is not allowed")
    for name, child in (node.get("properties") or {}).items():
        _check(child, f"{path}.{name}", errors)
    if isinstance(node.get("additionalProperties"), dict):
        _check(node["additionalProperties"], f"{path}[*]", errors)
    if isinstance(node.get("items"), dict):
        _check(node["items"], f"{path}[]", errors)
    for name in node.get("required") or []:
        if name not in (node.get("properties") or {}) and not preserve:
            errors.append(f"{path}: required field {name!r} has no property schema")


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Return a copy of ``value`` with the schema's defaults filled in."""
    value = copy.deepcopy(value)
    _default(schema, value)
    return value


def _default(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
        for name, sub in props.items():
            if name in value:
                _default(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                if name not in props:
                    _default(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(schema["items"], item)


def prune(schema: dict[str, Any], value: Any, root: bool = True) -> Any:
    """Return a copy of ``value`` without fields unknown to the schema.

    At the root, ``metadata`` is kept whole (the apiserver handles ObjectMeta itself).
    """
    if root and isinstance(value, dict):
        out = _prune(schema, {k: v for k, v in value.items() if k != "metadata"})
        if "metadata" in value:
            out["metadata"] = copy.deepcopy(value["metadata"])
        return out
    return _prune(schema, value)


def _prune(schema: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            return copy.deepcopy(value)
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        out = {}
        for name, item in value.items():
            if props and name in props:
                out[name] = _prune(props[name], item)
            elif isinstance(extra, dict):
                out[name] = _prune(extra, item)
            elif schema.get("x-kubernetes-preserve-unknown-fields"):
                out[name] = copy.deepcopy(item)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(schema["items"], item) for item in value]
    return copy.deepcopy(value)


def walk(schema: dict[str, Any], path: str = ""):
    """Yield ``(path, node)`` for every schema node (``[]`` for items, ``[*]`` for map values)."""
    yield path, schema
    for name, child in (schema.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}[*]")


def node_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema node at a dotted path such as ``.spec.storage.accessMode`` or ``.spec.files[]``."""
    for p, node in walk(schema):
        if p == path:
            return node
    raise KeyError(path)
