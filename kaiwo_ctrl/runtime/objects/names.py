"""Derived object names and label values: the one rule for all of them.

Children, volumes and labels are named after the object they belong to
(``<name>-data``, ``secret-<secretName>``, ``kaiwo.silogen.ai/name=<name>``).
Kubernetes limits those strings: a DNS-1123 label (volume names, most child
names) is at most 63 lower-case alphanumerics and ``-``; a DNS-1123 subdomain
(object names) also allows ``.`` and 253 characters; a label value is at most
63 characters of ``[A-Za-z0-9_.-]``, beginning and ending alphanumerically.

The rule, deterministic and injective in practice:

* When ``<prefix>-<base>-<suffix>`` is already valid and fits, it is used as is,
  so ordinary names read exactly as before.
* Otherwise the base is normalised (characters outside the alphabet become
  ``-``), cut so that everything fits, and an 8-hex-digit hash of the original
  parts is put between it and the suffix: ``<prefix>-<cut base>-<hash>-<suffix>``.
  The prefix and suffix stay readable, and two different bases that cut to the
  same text still get different names (the hash is of the uncut input).
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "HASH_LENGTH",
    "LABEL_MAX",
    "SUBDOMAIN_MAX",
    "derived_name",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_label_value",
    "label_value",
    "short_hash",
]

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
HASH_LENGTH = 8

_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NOT_LABEL_CHARS = re.compile(r"[^a-z0-9-]+")
_NOT_SUBDOMAIN_CHARS = re.compile(r"[^a-z0-9.-]+")
_NOT_VALUE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
# In a subdomain every dot-separated part must begin and end alphanumerically.
_BAD_DOTS = re.compile(r"-*\.[-.]*")


def is_dns1123_label(value: str) -> bool:
    return len(value) <= LABEL_MAX and bool(_LABEL_RE.match(value))


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= SUBDOMAIN_MAX and bool(_SUBDOMAIN_RE.match(value))


def is_label_value(value: str) -> bool:
    return len(value) <= LABEL_MAX and bool(_LABEL_VALUE_RE.match(value))


def short_hash(*parts: str) -> str:
    """8 hex digits of SHA-256 over the parts (NUL-separated, so ``("ab","c")``
    and ``("a","bc")`` differ)."""
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LENGTH]


def _normalise(value: str, dots: bool) -> str:
    text = (value or "").lower()
    if dots:
        text = _NOT_SUBDOMAIN_CHARS.sub("-", text)
        text = _BAD_DOTS.sub(".", text)
        text = re.sub(r"\.-+", ".", text)
    else:
        text = _NOT_LABEL_CHARS.sub("-", text)
    return text.strip("-.")


def _cut(text: str, room: int) -> str:
    """At most ``room`` characters, ending alphanumerically (may be empty)."""
    return text[: max(room, 0)].rstrip("-._")


def derived_name(base: str, suffix: str = "", *, prefix: str = "", max_length: int = LABEL_MAX, dots: bool = False) -> str:
    """``<prefix>-<base>-<suffix>`` as a valid DNS-1123 label (``dots=False``)
    or subdomain (``dots=True``) of at most ``max_length`` characters.

    ``prefix`` and ``suffix`` are the caller's constants (``secret``, ``data``)
    and are kept whole; only the base is cut, with a hash added when it is.
    """
    valid = is_dns1123_subdomain if dots else is_dns1123_label
    plain = "-".join(p for p in (prefix, base, suffix) if p)
    if len(plain) <= max_length and valid(plain):
        return plain
    digest = short_hash(prefix, base, suffix)
    fixed = [p for p in (_normalise(prefix, dots), _normalise(suffix, dots)) if p]
    room = max_length - sum(len(p) + 1 for p in fixed) - len(digest)
    if room < 0:  # the constants alone do not fit: keep the hash and what fits
        return _cut("-".join([*fixed[:1], digest]), max_length) or digest
    head = _normalise(prefix, dots)
    cut = _cut(_normalise(base, dots), room - (1 if room else 0))
    tail = _normalise(suffix, dots)
    return "-".join(p for p in (head, cut, digest, tail) if p)


def label_value(value: str | None) -> str:
    """``value`` when it is a valid label value, else a valid one of at most 63
    characters: normalised, cut, and ended with a hash of the original."""
    text = value or ""
    if is_label_value(text):
        return text
    digest = short_hash(text)
    cut = _NOT_VALUE_CHARS.sub("-", text).strip("-._")
    cut = _cut(cut, LABEL_MAX - HASH_LENGTH - 1)
    return f"{cut}-{digest}" if cut else digest
