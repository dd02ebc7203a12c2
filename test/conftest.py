"""Shared fixtures: one real control plane (etcd + kube-apiserver) per session.

Integration tests never use a fake API server. The binaries come from
hack/envtest/build.sh (cached outside the repository); when they cannot be
built the fixture fails loudly rather than skipping.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest

from kaiwo_ctrl.local.controlplane import ControlPlane, locate_assets
from support.admin import admin_http


@pytest.fixture(autouse=True)
def _root_logger_restored():
    """A test that runs a CLI in-process installs a handler on the root logger
    bound to that test's captured stderr; drop it when the test ends, so later
    log records are not written to a closed stream."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory):
    plane = ControlPlane(directory=tmp_path_factory.mktemp("control-plane"), assets=locate_assets(build=True))
    plane.start(install_crds=True)
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def admin(control_plane: ControlPlane):
    """A synchronous admin HTTP client for arranging and asserting."""
    with admin_http(control_plane) as h:
        yield h


@pytest.fixture
def namespace(admin) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


@pytest.fixture
async def client(control_plane: ControlPlane):
    from kaiwo_ctrl.runtime.api.client import Client

    c = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    yield c
    await c.close()


ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("KAIWO_CTRL_REPO", str(ROOT))


#: marker -> the environment variable that asks for it (the real-parts tests; ./hack/test.sh sets it)
OPT_IN = {"real_gateway": "KAIWO_REAL_GATEWAY", "real_engines": "KAIWO_REAL_ENGINES"}


def pytest_collection_modifyitems(config, items):
    """The real-parts tests run only when asked for (``./hack/test.sh --real-gateway`` sets
    KAIWO_REAL_GATEWAY=1, ``--real-engines`` KAIWO_REAL_ENGINES=1): they need parts the default set-up does
    not install. Deselected, not skipped: they are not counted as passed."""
    off = [m for m, var in OPT_IN.items() if os.environ.get(var) != "1"]
    drop = [i for i in items if any(i.get_closest_marker(m) is not None for m in off)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]
