"""``kaiwo-ctrl download model <url> <dir>`` (a Model's cache loader) against local S3 and Azurite servers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kaiwo_ctrl.download.model import UnsafePath, safe_target

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_model(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HF_", "AZURE_"))}
    full.update(env or {})
    full["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run([sys.executable, "-m", "kaiwo_ctrl", "download", "model", *args],
                          capture_output=True, text=True, env=full, timeout=120, cwd=str(REPO_ROOT))


def test_s3_prefix_into_directory(s3_server, tmp_path):
    c = s3_server.client
    c.create_bucket(Bucket="models")
    c.put_object(Bucket="models", Key="llm/x/config.json", Body=b"{}")
    c.put_object(Bucket="models", Key="llm/x/weights/part-1.safetensors", Body=b"w" * 1000)
    c.put_object(Bucket="models", Key="llm/other/skip.bin", Body=b"no")
    env = {"AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_ACCESS_KEY_ID": s3_server.access_key_id,
           "AWS_SECRET_ACCESS_KEY": s3_server.secret_access_key, "AWS_DEFAULT_REGION": "us-east-1"}
    target = tmp_path / "models" / "m-uid"
    r = run_model(["s3://models/llm/x", str(target)], env)
    assert r.returncode == 0, r.stderr
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == ["config.json", "weights/part-1.safetensors"]
    assert (target / "weights/part-1.safetensors").read_bytes() == b"w" * 1000
    assert s3_server.secret_access_key not in r.stderr
    # a second run skips what is there (same size) and still succeeds
    r = run_model(["s3://models/llm/x", str(target)], env)
    assert r.returncode == 0 and "fetched" not in r.stderr


def test_bad_arguments_and_failures(s3_server, tmp_path):
    assert run_model([]).returncode == 2
    assert run_model(["ftp://x/y", str(tmp_path)]).returncode == 2
    env = {"AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_ACCESS_KEY_ID": "wrong", "AWS_SECRET_ACCESS_KEY": "wrong",
           "AWS_DEFAULT_REGION": "us-east-1"}
    r = run_model(["s3://missing-bucket/x", str(tmp_path / "t")], env)
    assert r.returncode == 1 and "failed" in r.stderr


@pytest.mark.parametrize("key", ["../etc/passwd", "a/../../b", "", "a//b"])
def test_keys_outside_the_root_are_refused(tmp_path, key):
    with pytest.raises(UnsafePath):
        safe_target(tmp_path, key)
    assert safe_target(tmp_path, "/a/b.bin") == (tmp_path / "a/b.bin").resolve()


def test_az_prefix_into_directory(azurite, tmp_path):
    from azure.storage.blob import BlobServiceClient

    from dl_servers import AZURITE_KEY

    svc = BlobServiceClient.from_connection_string(azurite.connection_string())
    svc.create_container("models")
    for name, body in {"llm/x/config.json": b"{}", "llm/x/w/part-1.safetensors": b"a" * 2048, "llm/y/skip": b"no"}.items():
        svc.get_blob_client("models", name).upload_blob(body)
    env = {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string()}
    target = tmp_path / "m-uid"
    r = run_model(["az://models/llm/x", str(target)], env)
    assert r.returncode == 0, r.stderr
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == ["config.json", "w/part-1.safetensors"]
    assert (target / "w/part-1.safetensors").read_bytes() == b"a" * 2048
    assert AZURITE_KEY not in r.stderr
    r = run_model(["az://models/llm/x", str(target)], env)  # already there: nothing fetched
    assert r.returncode == 0 and "fetched" not in r.stderr
    # no connection string: a bad-arguments exit naming the variable; a wrong key: a failed download
    r = run_model(["az://models/llm/x", str(tmp_path / "t")])
    assert r.returncode == 2 and "AZURE_STORAGE_CONNECTION_STRING" in r.stderr
    r = run_model(["az://models/llm/x", str(tmp_path / "t")], {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string("d3Jvbmc=")})
    assert r.returncode == 1 and "failed" in r.stderr
