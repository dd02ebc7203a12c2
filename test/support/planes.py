"""A control plane of a test module's own, for tests that rewrite cluster-wide state.

The session's shared plane is the ``control_plane`` fixture in ``test/conftest.py``;
modules that need their own start one with :func:`own_plane`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from kaiwo_ctrl.local.controlplane import ControlPlane, locate_assets


@contextmanager
def own_plane(tmp_path_factory: pytest.TempPathFactory, name: str, *, install_crds: bool = True,
              components: tuple[str, ...] = ()) -> Iterator[ControlPlane]:
    """Start etcd + kube-apiserver (and ``components``) in a fresh directory; stop them after."""
    plane = ControlPlane(directory=tmp_path_factory.mktemp(name), assets=locate_assets(build=True), components=components)
    plane.start(install_crds=install_crds)
    try:
        yield plane
    finally:
        plane.stop()
