"""Model URLs: ``<scheme>://<ref>[?<query>]``.

``ref`` is everything up to the first ``?`` and is split at its first ``/``
into ``name`` (bucket, repository owner, claim) and ``path`` (the rest). The
query keys used are ``model`` (an Ollama tag inside a PVC), ``insecure=true``
and ``pull=false`` (Ollama pulls); others are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs

from kaiwo_ctrl.runtime.objects.fielderrors import FieldError

_URL = re.compile(r"^([a-z0-9]+)://([^?]*)(?:\?(.*))?$")
SCHEMES = ("hf", "pvc", "ollama", "s3", "gs", "oss")


@dataclass(frozen=True)
class ModelURL:
    original: str
    scheme: str
    ref: str
    name: str
    path: str
    model_param: str = ""
    insecure: bool = False
    pull: bool = True


def parse_url(url: str, field: str = "spec.url") -> ModelURL:
    m = _URL.match(url or "")
    if not m:
        raise FieldError(field, f"invalid model url {url!r}: expected <scheme>://<ref>", url)
    scheme, ref, query = m.group(1), m.group(2), m.group(3) or ""
    if scheme not in SCHEMES:
        raise FieldError(field, f"unsupported scheme {scheme!r} (known: {', '.join(SCHEMES)})", url)
    name, _, path = ref.partition("/")
    params = {k.lower(): v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    return ModelURL(
        original=url,
        scheme=scheme,
        ref=ref,
        name=name,
        path=path,
        model_param=params.get("model", ""),
        insecure=params.get("insecure", "").lower() == "true",
        pull=params.get("pull", "").lower() != "false",
    )
