"""A control plane of a test module's own, for tests that rewrite cluster-wide state.

The session's shared plane is the ``control_plane`` fixture in ``test/conftest.py``;
modules that need their own start one with :func:`own_plane`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from kaiwo_ctrl.local.controlplane import ControlPlane, locate_assets


@contextmanager
def own_plane(tmp_path_factory: pytest.TempPathFactory, name: str, *, install_crds: bool = True,
              components: tuple[str, ...] = (), **options: Any) -> Iterator[ControlPlane]:
    """Start etcd + kube-apiserver (and ``components``) in a fresh directory; stop them after.

    ``options`` go to :class:`ControlPlane` (e.g. ``sim_forwards``)."""
    plane = ControlPlane(directory=tmp_path_factory.mktemp(name), assets=locate_assets(build=True), components=components,
                         **options)
    plane.start(install_crds=install_crds)
    try:
        yield plane
    finally:
        plane.stop()
