"""Azure Blob downloads against Azurite (installed from npm by
hack/setup-download-emulators.sh). If Azurite cannot be installed, these tests
fail with the setup script's output; they are never skipped."""

from __future__ import annotations

import base64
import os
import uuid

from dl_servers import AZURITE_KEY


def _container(azurite, objects: dict[str, bytes]) -> str:
    from azure.storage.blob import BlobServiceClient

    svc = BlobServiceClient.from_connection_string(azurite.connection_string())
    name = f"c-{uuid.uuid4().hex[:12]}"
    cc = svc.create_container(name)
    for key, body in objects.items():
        cc.upload_blob(key, body)
    return name


def test_files_and_folders(azurite, run_download, secret_file, tmp_path):
    objs = {"m/weights.bin": os.urandom(5 * 1024 * 1024 + 3), "imgs/1.jpg": b"1", "imgs/2.jpg": b"22", "imgs/meta.txt": b"m"}
    container = _container(azurite, objs)
    cfg = {
        "azureBlob": [
            {
                "connectionString": secret_file("az", azurite.connection_string()),
                "containers": [
                    {
                        "name": container,
                        "files": [{"path": "m/weights.bin", "targetPath": "w/weights.bin"}],
                        "folders": [{"path": "imgs", "targetPath": "images", "glob": "*.jpg"}],
                    }
                ],
            }
        ]
    }
    data = tmp_path / "data"
    r = run_download(cfg, data_dir=data)
    assert r.code == 0, r.stderr
    assert (data / "w/weights.bin").read_bytes() == objs["m/weights.bin"]
    assert sorted(p.name for p in (data / "images").iterdir()) == ["1.jpg", "2.jpg"]
    assert AZURITE_KEY not in r.stderr
    r2 = run_download(cfg, data_dir=data)
    assert r2.code == 0 and len(r2.by_event("file_skipped")) == 3, r2.stderr


def test_wrong_account_key_is_auth_failure(azurite, run_download, secret_file, tmp_path):
    container = _container(azurite, {"a": b"a"})
    wrong_key = base64.b64encode(b"k" * 64).decode()
    cfg = {"azureBlob": [{"connectionString": secret_file("az", azurite.connection_string(wrong_key)), "containers": [{"name": container, "files": [{"path": "a", "targetPath": "a"}]}]}]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 3, r.stderr
    assert r.failed["kind"] == "auth"
    assert container in r.failed["item"]
    assert wrong_key not in r.stderr


def test_missing_blob_and_container(azurite, run_download, secret_file, tmp_path):
    container = _container(azurite, {"a": b"a"})
    conn = secret_file("az", azurite.connection_string())
    r = run_download({"azureBlob": [{"connectionString": conn, "containers": [{"name": container, "files": [{"path": "missing.bin", "targetPath": "m"}]}]}]}, data_dir=tmp_path / "d")
    assert r.code == 4, r.stderr
    assert "missing.bin" in r.failed["error"]
    r = run_download({"azureBlob": [{"connectionString": conn, "containers": [{"name": "nosuchcontainer", "folders": [{"path": "x", "targetPath": "x"}]}]}]}, data_dir=tmp_path / "d")
    assert r.code == 4, r.stderr
    r = run_download({"azureBlob": [{"connectionString": conn, "containers": [{"name": "nosuchcontainer", "files": [{"path": "x", "targetPath": "x"}]}]}]}, data_dir=tmp_path / "d")
    assert r.code == 4, r.stderr
    assert "nosuchcontainer" in r.failed["error"]


def test_bad_connection_string_is_config_error(run_download, secret_file, tmp_path):
    cfg = {"azureBlob": [{"connectionString": secret_file("az", "this is not a connection string"), "containers": [{"name": "c", "files": [{"path": "x", "targetPath": "x"}]}]}]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 2, r.stderr
    assert "this is not a connection string" not in r.stderr
