"""The RayService of a Ray KaiwoService: made by the AppWrapper controller
from the manifest :mod:`.build` puts into the AppWrapper, owned by the
AppWrapper, so only read (status mapper in :mod:`.status`, its events mapped
by :mod:`.watch`)."""

from __future__ import annotations

from kaiwo_ctrl.kinds import RAYSERVICES

from ..spec import ChildSpec
from .watch import ray_service_owner

CHILD = ChildSpec(RAYSERVICES, ray=True, terminate=True, watch=ray_service_owner, key="ray_service")
