"""The Deployment of a non-Ray KaiwoService: its table entry (builder in
:mod:`.build`, status mapper in :mod:`.status`)."""

from __future__ import annotations

from kaiwo_ctrl.runtime.api.resources import DEPLOYMENTS

from ..spec import ChildSpec, Paths
from .build import build_deployment
from .status import status

CHILD = ChildSpec(
    DEPLOYMENTS, build=build_deployment, status=status, paths=Paths(immutable=("spec.selector",)),
    ray=False, main=True, terminate=True,
)
