"""A listener that cannot bind is an error naming its flag, in the process that owns it.

``kaiwo-ctrl proxy`` and ``kaiwo-ctrl run`` bind every listener they own before anything
else starts (before the kubeconfig is even read), and exit with EXIT_LISTENER (3) and one
line naming the flag, the address and the reason. Each case occupies a real port on
127.0.0.1, starts the real command as a process and reads what it printed.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kaiwo_ctrl.runtime.process.listeners import EXIT_LISTENER, ListenerError, check_binds, parse_bind

FLAGS = ("--health-probe-bind-address", "--metrics-bind-address", "--proxy-bind-address", "--proxy-gateway-bind-address")


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another process listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    yield s.getsockname()[1]
    s.close()


def free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: str, flag: str, port: int, tmp_path) -> subprocess.CompletedProcess:
    """The command with every listener on a free loopback port but ``flag`` on ``port``;
    a kubeconfig that points nowhere, so a process that got past its listeners would fail otherwise."""
    addrs = {f: f"127.0.0.1:{free()}" for f in FLAGS}
    addrs[flag] = f"127.0.0.1:{port}"
    argv = [sys.executable, "-m", "kaiwo_ctrl", cmd, "--kubeconfig", str(tmp_path / "missing-kubeconfig")]
    argv += [f"{f}={a}" for f, a in addrs.items()]
    if cmd == "run":
        argv.append(f"--webhook-bind-address={addrs.get('--webhook-bind-address', f'127.0.0.1:{free()}')}")
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("cmd", ["proxy", "run"])
@pytest.mark.parametrize("flag", FLAGS)
def test_a_taken_port_exits_naming_the_flag(cmd, flag, taken, tmp_path):
    out = start(cmd, flag, taken, tmp_path)
    assert out.returncode == EXIT_LISTENER, (out.returncode, out.stderr[-2000:])
    assert f"kaiwo-ctrl {cmd}: {flag} 127.0.0.1:{taken}: address already in use" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert "missing-kubeconfig" not in out.stderr, "nothing started before the listeners were checked"


def test_run_names_the_webhook_flag(taken, tmp_path):
    argv = [sys.executable, "-m", "kaiwo_ctrl", "run", "--kubeconfig", str(tmp_path / "missing"),
            *(f"{f}=127.0.0.1:{free()}" for f in FLAGS), f"--webhook-bind-address=127.0.0.1:{taken}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == EXIT_LISTENER
    assert f"--webhook-bind-address 127.0.0.1:{taken}: address already in use" in out.stderr, out.stderr[-2000:]


def test_free_ports_pass_the_check_and_the_process_goes_on(tmp_path):
    """With every port free the listeners are released again and start-up continues
    (here to the missing kubeconfig, a different error with a different exit code)."""
    out = start("proxy", "--proxy-bind-address", free(), tmp_path)
    assert out.returncode not in (0, EXIT_LISTENER), out.stderr[-2000:]
    assert "address already in use" not in out.stderr


def test_check_binds_rules(taken):
    # off, and the health and metrics listeners sharing one server, are fine
    check_binds({"--proxy-bind-address": "0", "--proxy-gateway-bind-address": "",
                 "--health-probe-bind-address": f"127.0.0.1:{free()}"})
    port = free()
    check_binds({"--health-probe-bind-address": f"127.0.0.1:{port}", "--metrics-bind-address": f"127.0.0.1:{port}"})
    with pytest.raises(ListenerError, match=r"^--proxy-gateway-bind-address 127.0.0.1:\d+: the same address as --proxy-bind-address$"):
        check_binds({"--proxy-bind-address": f"127.0.0.1:{port}", "--proxy-gateway-bind-address": f"127.0.0.1:{port}"})
    with pytest.raises(ListenerError, match="^--metrics-bind-address 8080: not HOST:PORT"):
        check_binds({"--metrics-bind-address": "8080"})
    with pytest.raises(ListenerError, match="^--proxy-bind-address :99999: not HOST:PORT"):
        check_binds({"--proxy-bind-address": ":99999"})
    with pytest.raises(ListenerError, match="address not available on this host"):
        check_binds({"--proxy-bind-address": "192.0.2.1:8000"})  # TEST-NET-1: not this host's
    with pytest.raises(ListenerError) as e:
        check_binds({"--proxy-gateway-bind-address": f"127.0.0.1:{taken}"})
    assert (e.value.flag, e.value.reason) == ("--proxy-gateway-bind-address", "address already in use")
    assert parse_bind("--x", ":8001") == ("0.0.0.0", 8001) and parse_bind("--x", "[::1]:8001") == ("::1", 8001)
