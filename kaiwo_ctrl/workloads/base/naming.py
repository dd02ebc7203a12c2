"""Names and label values derived from a workload, through the one
name-derivation rule in :mod:`kaiwo_ctrl.runtime.objects.names`."""

from __future__ import annotations

import re

from kaiwo_ctrl.runtime.objects.names import LABEL_MAX, derived_name, label_value, short_hash

MAX_NAME_LENGTH = LABEL_MAX

_OUTSIDE = re.compile(r"[^a-z0-9.-]+")
_SEPARATOR_RUN = re.compile(r"[-.]{2,}")


def rfc1123_normalize(value: str | None) -> str:
    """Turn ``value`` (e.g. a user's e-mail) into a DNS-label-like label value.

    Lower-case; every run of characters outside ``[a-z0-9.-]`` becomes ``-``;
    leading/trailing ``-``/``.`` are stripped; runs of two or more separators
    collapse into one ``-``.

    The reference cut the result to 63 characters, so two long values sharing
    their first 63 characters got the same label; here a value that must be
    cut keeps its first 54 characters and ends with a hash of the whole input.
    A trailing ``.`` is stripped too (invalid in a label value).
    """
    text = _OUTSIDE.sub("-", (value or "").lower())
    text = text.strip("-.")
    text = _SEPARATOR_RUN.sub("-", text)
    if len(text) <= MAX_NAME_LENGTH:
        return text
    cut = text[: MAX_NAME_LENGTH - 9].rstrip("-.")
    return f"{cut}-{short_hash(value or '')}"


def name_with_suffix(name: str, suffix: str) -> str:
    """Child object name ``<name>-<suffix>`` (``job-data``), at most 63
    characters with the suffix always whole (a hash is added when the name is
    cut, so ``-data``, ``-hf`` and ``-download`` never collide)."""
    return derived_name(name, suffix, dots=True)


def volume_name(prefix: str, name: str) -> str:
    """A pod volume name ``<prefix>-<name>`` (a DNS-1123 label, so a Secret
    name with dots or over 56 characters still gives a valid, distinct name)."""
    return derived_name(name, prefix=prefix)


def name_label(name: str) -> str:
    """The ``kaiwo.silogen.ai/name`` (and ``app``) label value of a workload."""
    return label_value(name)
