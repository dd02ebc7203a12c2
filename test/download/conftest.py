"""Fixtures for the download program tests: real servers on 127.0.0.1, started
here and stopped at the end of the session, and a helper that runs
``python -m kaiwo_ctrl.download`` as a subprocess (real exit codes, real stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from dl_servers import Azurite, GcsEmulator, MotoS3, REPO_ROOT


@dataclass
class DownloadRun:
    code: int
    stderr: str
    events: list[dict]

    def by_event(self, name: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == name]

    @property
    def failed(self) -> dict:
        fails = self.by_event("failed")
        assert fails, f"no 'failed' event in:\n{self.stderr}"
        return fails[-1]


def parse_events(stderr: str) -> list[dict]:
    events = []
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return events


def downloader_cmd(config: Path, data_dir: Path | None = None, hf_dir: Path | None = None, extra: list[str] | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "kaiwo_ctrl.download", "--config", str(config)]
    if data_dir is not None:
        cmd += ["--data-dir", str(data_dir)]
    if hf_dir is not None:
        cmd += ["--hf-dir", str(hf_dir)]
    # Fast retries in tests; the defaults are for real clusters.
    cmd += ["--retries", "3", "--retry-delay", "0.2", "--progress-interval", "0.2"]
    return cmd + list(extra or [])


@pytest.fixture
def run_download(tmp_path):
    counter = {"n": 0}

    def run(config: dict, *, data_dir: Path | None = None, hf_dir: Path | None = None, env: dict | None = None, extra: list[str] | None = None, timeout: float = 300) -> DownloadRun:
        counter["n"] += 1
        cfg_path = tmp_path / f"config-{counter['n']}.yaml"
        cfg_path.write_text(json.dumps(config))
        full_env = dict(os.environ)
        full_env.pop("HF_TOKEN", None)
        # secret_file() writes below tmp_path/secrets: that is the mounted secrets dir
        full_env["KAIWO_DOWNLOAD_SECRETS_DIR"] = str(tmp_path / "secrets")
        for key, value in (env or {}).items():
            if value is None:  # None removes the variable
                full_env.pop(key, None)
            else:
                full_env[key] = value
        full_env["PYTHONPATH"] = str(REPO_ROOT)
        proc = subprocess.run(
            downloader_cmd(cfg_path, data_dir, hf_dir, extra), capture_output=True, text=True, env=full_env, timeout=timeout, cwd=str(REPO_ROOT)
        )
        return DownloadRun(proc.returncode, proc.stderr, parse_events(proc.stderr))

    return run


@pytest.fixture
def secret_file(tmp_path):
    """Write a secret value to a file the way a Secret volume mounts it."""

    def write(name: str, value: str) -> dict:
        d = tmp_path / "secrets"
        d.mkdir(exist_ok=True)
        p = d / name
        p.write_text(value)
        return {"file": str(p)}

    return write


@pytest.fixture(scope="session")
def s3_server():
    server = MotoS3()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_emulator():
    emu = GcsEmulator()
    yield emu
    emu.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    # No skip: if Azurite cannot be installed, the Azure tests fail with the reason.
    emu = Azurite(tmp_path_factory.mktemp("azurite"))
    yield emu
    emu.stop()
