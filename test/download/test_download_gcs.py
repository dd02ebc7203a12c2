"""GCS downloads against gcp-storage-emulator, with the service-account key's
token_uri pointing at a local OAuth2 token endpoint that verifies the JWT."""

from __future__ import annotations

import os
import uuid

import pytest
from dl_servers import make_token_server, rsa_key_pair, service_account_json


@pytest.fixture(scope="module")
def gcs_auth():
    private_pem, public_pem = rsa_key_pair()
    server = make_token_server(public_pem).start()
    yield {"token_uri": server.url + "/token", "private_pem": private_pem, "server": server}
    server.stop()


def _bucket(gcs_emulator, objects: dict[str, bytes]) -> str:
    client = gcs_emulator.client()
    name = f"g-{uuid.uuid4().hex[:12]}"
    bucket = client.create_bucket(name)
    for key, body in objects.items():
        bucket.blob(key).upload_from_string(body)
    return name


def test_files_and_folders(gcs_emulator, gcs_auth, run_download, secret_file, tmp_path):
    objs = {"ckpt/model.pt": os.urandom(2 * 1024 * 1024 + 5), "ds/a.csv": b"a,b\n1,2\n", "ds/b.csv": b"x\n", "ds/readme.md": b"#"}
    bucket = _bucket(gcs_emulator, objs)
    key_json = service_account_json(gcs_auth["token_uri"], gcs_auth["private_pem"])
    cfg = {
        "gcs": [
            {
                "applicationCredentials": secret_file("gcs.json", key_json),
                "buckets": [
                    {
                        "name": bucket,
                        "files": [{"path": "ckpt/model.pt", "targetPath": "model.pt"}],
                        "folders": [{"path": "ds/", "targetPath": "csv", "glob": "*.csv"}],
                    }
                ],
            }
        ]
    }
    data = tmp_path / "data"
    r = run_download(cfg, data_dir=data, env={"STORAGE_EMULATOR_HOST": gcs_emulator.endpoint})
    assert r.code == 0, r.stderr
    assert (data / "model.pt").read_bytes() == objs["ckpt/model.pt"]
    assert sorted(p.name for p in (data / "csv").iterdir()) == ["a.csv", "b.csv"]
    assert (data / "csv/a.csv").read_bytes() == objs["ds/a.csv"]
    assert gcs_auth["server"].grants, "no token was requested with the service-account key"
    # The private key never reaches the logs, not even one line of it.
    for line in gcs_auth["private_pem"].splitlines():
        if len(line) > 20:
            assert line not in r.stderr
    r2 = run_download(cfg, data_dir=data, env={"STORAGE_EMULATOR_HOST": gcs_emulator.endpoint})
    assert r2.code == 0 and len(r2.by_event("file_skipped")) == 3, r2.stderr


def test_wrong_key_is_auth_failure(gcs_emulator, gcs_auth, run_download, secret_file, tmp_path):
    bucket = _bucket(gcs_emulator, {"x": b"x"})
    other_private, _ = rsa_key_pair()  # a key the token endpoint does not know
    cfg = {
        "gcs": [
            {
                "applicationCredentials": secret_file("bad.json", service_account_json(gcs_auth["token_uri"], other_private)),
                "buckets": [{"name": bucket, "files": [{"path": "x", "targetPath": "x"}]}],
            }
        ]
    }
    r = run_download(cfg, data_dir=tmp_path / "d", env={"STORAGE_EMULATOR_HOST": gcs_emulator.endpoint})
    assert r.code == 3, r.stderr
    assert r.failed["kind"] == "auth"
    assert bucket in r.failed["item"]


def test_not_a_key_is_config_error(gcs_emulator, run_download, secret_file, tmp_path):
    cfg = {"gcs": [{"applicationCredentials": secret_file("junk.json", "not json at all"), "buckets": [{"name": "b", "files": [{"path": "x", "targetPath": "x"}]}]}]}
    r = run_download(cfg, data_dir=tmp_path / "d", env={"STORAGE_EMULATOR_HOST": gcs_emulator.endpoint})
    assert r.code == 2, r.stderr
    assert "not json at all" not in r.stderr


def test_missing_object_and_bucket(gcs_emulator, gcs_auth, run_download, secret_file, tmp_path):
    bucket = _bucket(gcs_emulator, {"there": b"x"})
    key = secret_file("gcs.json", service_account_json(gcs_auth["token_uri"], gcs_auth["private_pem"]))
    env = {"STORAGE_EMULATOR_HOST": gcs_emulator.endpoint}
    r = run_download({"gcs": [{"applicationCredentials": key, "buckets": [{"name": bucket, "files": [{"path": "gone", "targetPath": "g"}]}]}]}, data_dir=tmp_path / "d", env=env)
    assert r.code == 4, r.stderr
    assert "gone" in r.failed["error"]
    r = run_download({"gcs": [{"applicationCredentials": key, "buckets": [{"name": "no-such-gcs-bucket", "folders": [{"path": "", "targetPath": "g"}]}]}]}, data_dir=tmp_path / "d", env=env)
    assert r.code == 4, r.stderr
    assert "no-such-gcs-bucket" in r.failed["error"]
