"""A proxy listener taken after the start-up check (a race with another process):
the proxy runnable (``ProxyServer.serve``) stops the manager and raises a ListenerError naming the flag,
which ``kaiwo-ctrl run``/``proxy`` turn into exit status 3 and that line (the
start-up check itself is test/unit/runtime/process/test_listener_bind.py). Real apiserver."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.runtime.process.listeners import ListenerError
from kaiwo_ctrl.serving.proxy.server import setup_proxy

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("taken", ["--proxy-bind-address", "--proxy-gateway-bind-address"])
async def test_a_listener_taken_after_the_check_stops_the_process_naming_its_flag(control_plane, admin, taken):
    op_ns = f"op-{uuid.uuid4().hex[:8]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": op_ns}}).status_code == 201
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    addrs = {"--proxy-bind-address": "127.0.0.1:0", "--proxy-gateway-bind-address": "127.0.0.1:0", taken: f"127.0.0.1:{port}"}
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    setup_proxy(mgr, addrs["--proxy-bind-address"], gateway_bind=addrs["--proxy-gateway-bind-address"], operator_ns=op_ns,
                         auth=None)  # the open proxy: this test is about binding
    stop = asyncio.Event()
    try:
        with pytest.raises(ListenerError) as e:
            await asyncio.wait_for(mgr.run(stop), 90)
    finally:
        holder.close()
        await client.close()
    assert (e.value.flag, e.value.address, e.value.reason) == (taken, f"127.0.0.1:{port}", "address already in use")
    assert str(e.value) == f"{taken} 127.0.0.1:{port}: address already in use"
    # the manager stopped with the proxy: its probes no longer listen
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", mgr.bound["health"]), timeout=2).close()
