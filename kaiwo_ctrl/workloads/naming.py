"""RFC 1123 name normalisation used for labels and child object names."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 63

_OUTSIDE = re.compile(r"[^a-z0-9.-]+")
_SEPARATOR_RUN = re.compile(r"[-.]{2,}")


def rfc1123_normalize(value: str | None) -> str:
    """Turn ``value`` into a DNS label-ish string of at most 63 characters.

    Lower-case; every run of characters outside ``[a-z0-9.-]`` becomes ``-``;
    leading/trailing ``-``/``.`` are stripped; runs of two or more separators
    collapse into one ``-``; the result is cut to 63 characters.

    The spec only strips a trailing ``-`` after the cut; a trailing ``.`` is
    just as invalid in a label value or name, so both are stripped here.
    """
    text = _OUTSIDE.sub("-", (value or "").lower())
    text = text.strip("-.")
    text = _SEPARATOR_RUN.sub("-", text)
    return text[:MAX_NAME_LENGTH].rstrip("-.")


def name_with_suffix(name: str, suffix: str) -> str:
    """Child object name ``<name>-<suffix>``, normalised (e.g. ``job-data``)."""
    return rfc1123_normalize(f"{name}-{suffix}")
