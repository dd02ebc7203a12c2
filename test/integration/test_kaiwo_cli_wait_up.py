"""``kaiwo ... --wait`` takes READY and RUNNING both as "up".

A fully available KaiwoService reports READY (the API reference's status);
upstream's Go operator reports RUNNING. A script migrating from it waits with
``--wait``, which must end on either, against the real API server.
"""

from __future__ import annotations

import asyncio

import pytest

from kaiwo_ctrl.kaiwo_cli.wait import follow

pytestmark = pytest.mark.integration
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
MERGE = {"Content-Type": "application/merge-patch+json"}


def set_status(admin, plural: str, ns: str, name: str, status: str) -> None:
    r = admin.patch(f"{KAIWO}/namespaces/{ns}/{plural}/{name}/status", json={"status": {"status": status}}, headers=MERGE)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("kind", "plural", "up"), [
    ("KaiwoService", "kaiwoservices", "READY"),
    ("KaiwoService", "kaiwoservices", "RUNNING"),
    ("KaiwoJob", "kaiwojobs", "RUNNING"),
])
async def test_wait_ends_on_ready_and_on_running(admin, client, namespace, capsys, kind, plural, up):
    name = f"up-{up.lower()}"
    body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": kind, "metadata": {"name": name},
            "spec": {"user": "u@example.com", "image": "busybox:1.36"}}
    r = admin.post(f"{KAIWO}/namespaces/{namespace}/{plural}", json=body)
    assert r.status_code == 201, r.text
    set_status(admin, plural, namespace, name, "STARTING")
    task = asyncio.create_task(follow(client, kind, namespace, name, until="running", timeout=60))
    set_status(admin, plural, namespace, name, up)
    assert await asyncio.wait_for(task, 60) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{kind.lower()}/{name} {up}"


async def test_wait_keeps_waiting_while_starting(admin, client, namespace):
    """Neither READY nor RUNNING: the wait runs into its timeout (exit code, not 0)."""
    body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoService", "metadata": {"name": "starting"},
            "spec": {"user": "u@example.com", "image": "busybox:1.36"}}
    assert admin.post(f"{KAIWO}/namespaces/{namespace}/kaiwoservices", json=body).status_code == 201
    set_status(admin, "kaiwoservices", namespace, "starting", "STARTING")
    from kaiwo_ctrl.kaiwo_cli.errors import CliError

    with pytest.raises(CliError, match="still STARTING"):
        await follow(client, "KaiwoService", namespace, "starting", until="running", timeout=2)
