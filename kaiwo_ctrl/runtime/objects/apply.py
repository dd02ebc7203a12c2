"""Write only what differs.

``contains(actual, desired)`` answers "would applying ``desired`` change
anything?" and ``differing_paths`` names what would change. Both are the one
object diff of :mod:`kaiwo_ctrl.runtime.objects.diff` (see its list and quantity
rules). A reconcile that finds nothing changed makes no request at all.
"""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.runtime.objects.diff import contains, differences

__all__ = ["contains", "differing_paths"]


def differing_paths(actual: Any, desired: Any, prefix: str = "") -> list[str]:
    """Paths (``spec.template.spec.containers[main].image``) where ``actual`` lacks ``desired``."""
    return differences(actual, desired, prefix)
