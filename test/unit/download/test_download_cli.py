"""Argument and configuration handling of kaiwo_ctrl.download.main.main()."""

from __future__ import annotations

import json
import subprocess
import sys

from kaiwo_ctrl.download.main import main
from support import REPO

REPO = REPO


def _events(err: str) -> list[dict]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_empty_config_is_ok(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("downloadRoot: ''\nhfHome: ''\n")
    assert main(["--config", str(cfg), "--data-dir", str(tmp_path / "d")]) == 0
    ev = _events(capsys.readouterr().err)
    assert ev[0]["event"] == "start" and ev[-1]["event"] == "done"


def test_positional_config_and_dirs_from_file(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"downloadRoot: {tmp_path / 'root'}\nhfHome: {tmp_path / 'hf'}\n")
    assert main(["--log-level=INFO", str(cfg)]) == 0
    start = _events(capsys.readouterr().err)[0]
    assert start["data_dir"] == str(tmp_path / "root") and start["hf_dir"] == str(tmp_path / "hf")
    # Flags win over the file.
    assert main(["--config", str(cfg), "--data-dir", "/x", "--hf-dir", "/y"]) == 0
    start = _events(capsys.readouterr().err)[0]
    assert start["data_dir"] == "/x" and start["hf_dir"] == "/y"


def test_bad_invocations_exit_2(tmp_path, capsys):
    assert main([]) == 2
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert "not found" in _events(capsys.readouterr().err)[-1]["error"]
    assert main(["--no-such-flag"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("s3: [{endpointUrl: x}]\n")
    assert main(["--config", str(bad)]) == 2
    assert "s3.0.buckets" in _events(capsys.readouterr().err)[-1]["error"]


def test_unmounted_secret_fails_before_any_transfer(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        json.dumps(
            {
                "azureBlob": [
                    {"connectionString": {"secretName": "az", "secretKey": "conn", "file": str(tmp_path / "not-mounted")}, "containers": [{"name": "c", "files": [{"path": "a", "targetPath": "a"}]}]}
                ]
            }
        )
    )
    assert main(["--config", str(cfg), "--data-dir", str(tmp_path / "d")]) == 2
    failed = _events(capsys.readouterr().err)[-1]
    assert failed["event"] == "failed" and "azureBlob[0].connectionString" in failed["error"]
    assert not (tmp_path / "d").exists()


def test_module_entry_point_exit_code(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kaiwo_ctrl.download", "--config", str(tmp_path / "nope")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert json.loads(proc.stderr.strip().splitlines()[-1])["exit_code"] == 2
