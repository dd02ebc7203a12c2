"""Child processes of the local control plane: start, watch, stop, and wait on them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

STOP_TIMEOUT = 20.0


class ControlPlaneError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, what: str, proc: Process | None = None) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` (with the log tail of
    ``proc``) on timeout, or at once when ``proc`` exits."""
    deadline = time.monotonic() + timeout
    last_err: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.popen is not None and proc.popen.poll() is not None:
            raise ControlPlaneError(f"{proc.name} exited with {proc.popen.returncode}; log tail:\n{proc.log_tail()}")
        try:
            if predicate():
                return
        except Exception as exc:  # noqa: BLE001 - polled until timeout
            last_err = exc
        time.sleep(0.1)
    tail = proc.log_tail() if proc else ""
    raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}: {last_err}\n{tail}")


@dataclass
class Process:
    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen | None = None
    pid: int | None = None
    #: the child's whole environment (None: this process's)
    env: dict[str, str] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        self.popen = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self.env,
        )
        fh.close()
        self.pid = self.popen.pid

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.pid is not None and pid_alive(self.pid)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> None:
        if self.pid is None:
            return
        terminate(self.pid, sig, timeout, self.popen)
        self.popen = None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie we are not the parent of still answers kill(0); check /proc
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def terminate(pid: int, sig: int, timeout: float, popen: subprocess.Popen | None = None) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen is not None:
            if popen.poll() is not None:
                return
        elif not pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if popen is not None:
        popen.wait(timeout=10)
