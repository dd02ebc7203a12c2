"""The download config file format (kaiwo_ctrl.download.config.DownloadConfig)."""

from __future__ import annotations

import json

import pytest
import yaml

from api.kaiwo.download import HuggingFaceDownloadItem, ObjectStorageDownloadSpec
from kaiwo_ctrl.download.config import DownloadConfig, read_secret
from kaiwo_ctrl.download.transfer import ConfigError


def _spec(doc: dict) -> ObjectStorageDownloadSpec:
    return ObjectStorageDownloadSpec.model_validate(doc)


def test_build_fills_secret_files_per_spec_rules():
    spec = _spec(
        {
            "s3": [
                {"endpointUrl": "http://s3", "accessKeyId": {"secretName": "s3", "secretKey": "id"}, "secretKey": {"secretName": "s3", "secretKey": "key"}, "buckets": []},
                {"endpointUrl": "http://public", "buckets": [{"name": "open", "files": [{"path": "a", "targetPath": "a"}]}]},
            ],
            "gcs": [{"applicationCredentials": {"secretName": "gcs", "secretKey": "sa.json"}, "buckets": []}],
            "azureBlob": [{"connectionString": {"secretName": "az", "secretKey": "conn", "file": "/custom/path"}, "containers": []}],
            "git": [{"repository": "https://example/r.git", "targetPath": "r", "token": {"secretName": "git", "secretKey": "token"}}],
        }
    )
    cfg = DownloadConfig.build(download_root="/workload", hf_home="/hf", data_download=spec, hf_repos=[HuggingFaceDownloadItem(repo_id="org/m")])
    doc = yaml.safe_load(cfg.to_config_yaml())
    assert list(doc) == ["downloadRoot", "hfHome", "s3", "gcs", "azureBlob", "git", "hf"]
    assert doc["s3"][0]["accessKeyId"]["file"] == "/app/secrets/s3/id"
    assert doc["s3"][0]["secretKey"]["file"] == "/app/secrets/s3/key"
    assert "accessKeyId" not in doc["s3"][1]
    assert doc["gcs"][0]["applicationCredentials"]["file"] == "/app/secrets/gcs/sa.json"
    assert doc["azureBlob"][0]["connectionString"]["file"] == "/custom/path"
    assert doc["git"][0]["token"]["file"] == "/app/secrets/git/token"
    assert doc["hf"] == [{"repoId": "org/m"}]
    assert cfg.secret_refs() == [("s3", "id"), ("s3", "key"), ("gcs", "sa.json"), ("az", "conn"), ("git", "token")]
    # The input spec is not modified.
    assert spec.s3[0].access_key_id.file is None


def test_roundtrip_and_empty_sections_omitted():
    cfg = DownloadConfig.build(download_root="", hf_home="/hf", hf_repos=[HuggingFaceDownloadItem(repo_id="a/b", files=["x"])])
    text = cfg.to_config_yaml()
    assert yaml.safe_load(text) == {"downloadRoot": "", "hfHome": "/hf", "hf": [{"repoId": "a/b", "files": ["x"]}]}
    assert DownloadConfig.from_text(text) == cfg
    assert DownloadConfig.from_text(cfg.to_json()) == cfg


def test_hugging_face_synonym_and_token(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"huggingFace": [{"repoId": "o/r", "token": {"file": "/t"}}]}))
    cfg = DownloadConfig.from_file(p)
    assert cfg.hf[0].repo_id == "o/r" and cfg.hf[0].token.file == "/t"
    assert cfg.to_dict()["hf"] == [{"repoId": "o/r", "token": {"file": "/t"}}]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("s3: [{buckets: []}]", "s3.0.endpointUrl"),
        ("- just a list", "top level must be a mapping"),
        ("a: [unclosed", "not valid YAML"),
        ("git: [{repository: r}]", "git.0.targetPath"),
    ],
)
def test_invalid_documents(text, fragment):
    with pytest.raises(ConfigError) as err:
        DownloadConfig.from_text(text, source="cfg.yaml")
    assert fragment in str(err.value)


def test_missing_file_and_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("KAIWO_DOWNLOAD_SECRETS_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="not found"):
        DownloadConfig.from_file(tmp_path / "nope.yaml")
    from api.kaiwo.download import ValueReference

    with pytest.raises(ConfigError, match="does not exist"):
        read_secret(ValueReference(file=str(tmp_path / "missing")), "s3[0].secretKey")
    (tmp_path / "s").write_text("  value-with-newline\n")
    assert read_secret(ValueReference(file=str(tmp_path / "s")), "x") == "value-with-newline"


def test_secret_fragments_cover_embedded_key_material():
    from kaiwo_ctrl.download.config import secret_fragments

    conn = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=QUJDREVGR0hJSktMTU5PUA==;EndpointSuffix=core.windows.net"
    assert "QUJDREVGR0hJSktMTU5PUA==" in secret_fragments(conn)
    sa = json.dumps({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvAIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n", "private_key_id": "abc123def456"})
    frags = secret_fragments(sa)
    assert "MIIEvAIBADANBgkqhkiG9w0BAQEFAASC" in frags and "abc123def456" in frags
    assert not [f for f in frags if f.startswith("-----")]  # the PEM armour lines are not secret
