"""`kaiwo` against the deployed operator on the simulated cluster: a KaiwoJob submitted with the
CLI is admitted by the real Kueue and its pod runs on a kwok Node; then its logs, an exec
with an exit code, and a request through `kaiwo port-forward`, all through the API server
to kwok (kaiwo_ctrl.local.kwokstreams)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from e2e.conftest import E2E_FORWARD_TARGET
from support.echoserver import serve_echo
from e2e.test_kueue_admission import NS, queue_ready  # noqa: F401 - fixture

pytestmark = pytest.mark.e2e

KAIWO = Path(sys.executable).parent / "kaiwo"


def test_submit_then_logs_exec_and_port_forward(queue_ready, sim_plane, tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "kaiwo").mkdir(parents=True)
    (home / ".config" / "kaiwo" / "kaiwoconfig.yaml").write_text(f"user: cli@example.com\nnamespace: {NS}\n"
                                                                 "clusterQueue: kaiwo\n")
    env = {k: v for k, v in os.environ.items() if k != "KAIWOCONFIG"}
    env.update({"HOME": str(home), "NO_COLOR": "1", "KUBECONFIG": str(sim_plane.kubeconfig)})

    def kaiwo(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([str(KAIWO), *args], capture_output=True, text=True, env=env, timeout=timeout)

    r = kaiwo("submit", "--name", "cli-streams", "-i", "busybox:1.36", "--gpus", "8", "--entrypoint", "sleep 1",
              "--wait", "--timeout", "120", timeout=180)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "kaiwojob/cli-streams RUNNING", (r.stdout, r.stderr)

    r = kaiwo("logs", "cli-streams")
    assert r.returncode == 0 and "simulated container on a kwok node" in r.stdout, r.stderr
    r = kaiwo("exec", "cli-streams", "--", "sh", "-c", "echo from-the-pod; exit 3")
    assert (r.returncode, r.stdout) == (3, "from-the-pod\n"), r.stderr

    server = serve_echo("pod port 8080", E2E_FORWARD_TARGET)
    pf = subprocess.Popen([str(KAIWO), "port-forward", "cli-streams", ":8080"], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = pf.stdout.readline()
        assert line.startswith("Forwarding from 127.0.0.1:"), (line, pf.poll())
        port = int(line.split("127.0.0.1:", 1)[1].split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/through-kaiwo", timeout=30) as resp:
            assert resp.read() == b"pod port 8080 saw /through-kaiwo"
    finally:
        pf.send_signal(signal.SIGINT)
        assert pf.wait(30) == 130
        server.shutdown()
    assert kaiwo("delete", "-y", "cli-streams").returncode == 0
