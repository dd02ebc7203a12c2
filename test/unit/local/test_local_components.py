"""The local plane's component command lines (pure)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from kaiwo_ctrl.local.components import POD_CIDR, Simulation, component_args


def test_simulated_pods_get_loopback_addresses(tmp_path: Path):
    stages = tmp_path / "stages.yaml"
    stages.write_text("")
    args = component_args("kwok", lambda b: Path("/bin") / b, tmp_path / "kubeconfig", tmp_path, stages, sim=Simulation(certs=tmp_path))
    cidr = [a.split("=", 1)[1] for a in args if a.startswith("--cidr=")]
    assert cidr == [POD_CIDR]
    net = ipaddress.ip_network(POD_CIDR)
    assert net.subnet_of(ipaddress.ip_network("127.0.0.0/8"))
    # clear of the 127.0.0.x addresses the tests' fake model servers bind
    assert not net.overlaps(ipaddress.ip_network("127.0.0.0/24"))
