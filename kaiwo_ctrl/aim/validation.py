"""Spec checks of an AIMNamespaceConfig that the CRD schema cannot express:
Secret references need both a valid ``secretName`` and a ``secretKey``,
image pull secrets must be valid Secret names, and a gateway namespace needs
a gateway name. The admission webhook refuses with these errors; the
reconciler reports the first one in the ``Ready`` condition, so a config that
got past a stopped webhook names the same field.

A ``spec.gateway.name`` without a namespace is valid: the Gateway is looked
up in the config's own namespace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.objects.fielderrors import FieldError

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    shown = value if not isinstance(value, str) or len(value) <= 64 else value[:61] + "..."
    return FieldError(path, f"Invalid value: {json.dumps(shown)}: {detail}", value)


def _secret_name_ok(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= 253 and bool(_SUBDOMAIN.match(name))


def _secret_ref_errors(path: str, ref: Any) -> list[FieldError]:
    if not isinstance(ref, Mapping):
        return []
    out = []
    name, key = ref.get("secretName"), ref.get("secretKey")
    if not name:
        out.append(FieldError(f"{path}.secretName", "Required value: a Secret reference needs secretName"))
    elif not _secret_name_ok(name):
        out.append(_invalid(f"{path}.secretName", name, "not a valid Secret name (lower-case RFC 1123 subdomain)"))
    if not key:
        out.append(FieldError(f"{path}.secretKey", "Required value: a Secret reference needs secretKey"))
    return out


def _refs(creds: Mapping[str, Any]) -> Iterable[tuple[str, Any]]:
    base = "spec.credentials"
    yield f"{base}.huggingFaceToken", creds.get("huggingFaceToken")
    for list_name, keys in (("s3", ("accessKeyId", "secretAccessKey")), ("gcs", ("applicationCredentials",)),
                            ("azureBlob", ("connectionString",))):
        for i, item in enumerate(creds.get(list_name) or []):
            for key in keys:
                if isinstance(item, Mapping):
                    yield f"{base}.{list_name}[{i}].{key}", item.get(key)


def spec_errors(doc: Mapping[str, Any]) -> list[FieldError]:
    """Every problem of the config's spec, each naming its field."""
    spec = doc.get("spec") or {}
    out: list[FieldError] = []
    for path, ref in _refs(spec.get("credentials") or {}):
        out += _secret_ref_errors(path, ref)
    for i, name in enumerate((spec.get("images") or {}).get("imagePullSecrets") or []):
        if not _secret_name_ok(name):
            out.append(_invalid(f"spec.images.imagePullSecrets[{i}]", name, "not a valid Secret name"))
    gw = spec.get("gateway") or {}
    if gw.get("namespace") and not gw.get("name"):
        out.append(FieldError("spec.gateway.name", "Required value: a gateway namespace needs a gateway name"))
    return out


def first_error(doc: Mapping[str, Any]) -> str:
    """The first spec error, as the status reports it ("" when the spec is valid)."""
    return next((str(e) for e in spec_errors(doc)), "")
