"""The AppWrapper of a Ray KaiwoService, wrapping its RayService: its table
entry (builder in :mod:`.build`, status mapper in :mod:`.status`)."""

from __future__ import annotations

from kaiwo_ctrl.kinds import APPWRAPPERS

from ..spec import SUSPEND, ChildSpec, Paths
from .build import build_appwrapper
from .status import status

CHILD = ChildSpec(
    # the AppWrapper webhook refuses changes to its components
    APPWRAPPERS, build=build_appwrapper, status=status, paths=Paths(immutable=("spec.components",), foreign=SUSPEND),
    ray=True, main=True, terminate=True,
)
