"""Errors that name the field they are about, in the style of Kubernetes'
``field.Error``: ``spec.job.template.spec.containers[0]: Invalid value: ...``.

Builders, validators and parsers raise :class:`FieldError` when user input is
wrong, so whoever catches it (a reconciler writing a status condition, an
admission webhook refusing a request) can name the field without guessing.
"""

from __future__ import annotations

from typing import Any


class FieldError(ValueError):
    """User input at ``path`` is not acceptable; ``detail`` says why."""

    def __init__(self, path: str, detail: str, value: Any = None) -> None:
        self.path = path
        self.detail = detail
        self.value = value
        super().__init__(f"{path}: {detail}" if path else detail)

    def under(self, prefix: str) -> "FieldError":
        """The same error with ``prefix`` put in front of its path."""
        path = f"{prefix}.{self.path}" if self.path and not self.path.startswith("[") else f"{prefix}{self.path}"
        return FieldError(path, self.detail, self.value)
