"""``field()``: one declaration that feeds both pydantic and the CRD schema.

Every attribute of an ``ApiModel`` in ``api/`` is declared with :func:`field`.
It builds an ordinary pydantic ``Field`` (so Python enforces the same
constraints the apiserver does) and records the OpenAPI-only details in
``json_schema_extra["crd"]``, where ``api.crdgen`` picks them up.

Defaults: a scalar Python default becomes the CRD ``default``; a
``default_factory`` that builds an ``ApiModel`` becomes ``default: {}`` (the
apiserver then fills the nested defaults, exactly like pydantic does).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic_core import PydanticUndefined

CRD_KEY = "crd"


def field(
    default: Any = PydanticUndefined,
    *,
    description: str,
    alias: str | None = None,
    default_factory: Any = None,
    enum: list[str] | None = None,
    pattern: str | None = None,
    minimum: int | float | None = None,
    maximum: int | float | None = None,
    min_items: int | None = None,
    max_items: int | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    max_properties: int | None = None,
    fmt: str | None = None,
    preserve_unknown: bool = False,
    int_or_string: bool = False,
    cel: list[tuple[str, str]] | None = None,
    schema: dict[str, Any] | None = None,
    items: dict[str, Any] | None = None,
    list_type: str | None = None,
) -> Any:
    """Declare a model attribute.

    ``cel`` is a list of ``(rule, message)`` pairs emitted as
    ``x-kubernetes-validations`` on this field's schema. ``schema`` replaces
    the generated schema of the field entirely (used for embedded Kubernetes
    types that get a hand-written partial schema). ``items`` adds keywords to
    the generated ``items`` schema of a list (CRD only, e.g. a per-item
    ``maxLength`` that CEL cost estimation needs). Enumerations are expressed
    with ``Literal[...]`` annotations, which pydantic enforces and the
    generator turns into ``enum``.
    """
    crd: dict[str, Any] = {}
    for key, value in (
        ("enum", enum),
        ("pattern", pattern),
        ("minimum", minimum),
        ("maximum", maximum),
        ("minItems", min_items),
        ("maxItems", max_items),
        ("minLength", min_length),
        ("maxLength", max_length),
        ("maxProperties", max_properties),
        ("format", fmt),
        ("x-kubernetes-list-type", list_type),
    ):
        if value is not None:
            crd[key] = value
    if preserve_unknown:
        crd["x-kubernetes-preserve-unknown-fields"] = True
    if int_or_string:
        crd["x-kubernetes-int-or-string"] = True
    if cel:
        crd["x-kubernetes-validations"] = [{"rule": r, "message": m} for r, m in cel]
    if schema is not None:
        crd["schema"] = schema
    if items is not None:
        crd["items"] = items

    kwargs: dict[str, Any] = {
        "description": description,
        "json_schema_extra": {CRD_KEY: crd},
    }
    if alias is not None:
        kwargs["alias"] = alias
    # Python-side enforcement of the same limits the apiserver applies.
    if pattern is not None:
        kwargs["pattern"] = pattern
    if minimum is not None:
        kwargs["ge"] = minimum
    if maximum is not None:
        kwargs["le"] = maximum
    if max_items is not None or max_length is not None or max_properties is not None:
        kwargs["max_length"] = next(v for v in (max_items, max_length, max_properties) if v is not None)
    if min_items is not None or min_length is not None:
        kwargs["min_length"] = min_items if min_items is not None else min_length
    if default_factory is not None:
        return Field(default_factory=default_factory, **kwargs)
    return Field(default, **kwargs)
