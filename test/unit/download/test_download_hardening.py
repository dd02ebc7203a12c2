"""The download program gives nothing away: secret scrubbing in every form,
path containment (symlinks, '..', absolute paths), secret files only from the
mounted secrets directory, and a top level that prints unexpected errors scrubbed."""

import io
import json
import os
from pathlib import Path

import pytest

from api.kaiwo.download import ValueReference
from kaiwo_ctrl.download import main as download_main
from kaiwo_ctrl.download.config import read_secret, url_credentials
from kaiwo_ctrl.download.placement import safe_join
from kaiwo_ctrl.download.transfer import ConfigError, EventLog

SECRETS = [
    'pa"ss\\word-123',
    "tab\there-and-newline\nsecond-line",
    "ünïcödé-sëcret",
    "plain-token-ABCDEF",
    "with space & sym/bols?=",
]


def _log():
    out = io.StringIO()
    return EventLog(stream=out), out


@pytest.mark.parametrize("secret", SECRETS)
def test_scrubbed_before_json_encoding(secret):
    log, out = _log()
    log.add_secret(secret)
    log.error("failed", error=f"boom: {secret}", nested={"k": [secret, {secret: 1}]}, url=f"https://x/?t={secret}")
    line = out.getvalue()
    record = json.loads(line)
    assert secret not in json.dumps(record, ensure_ascii=False)
    assert json.dumps(secret)[1:-1] not in line and secret not in line
    assert "***" in record["error"]


@pytest.mark.parametrize("secret", SECRETS)
def test_scrubbed_in_repr_and_url_quoted_forms(secret):
    from urllib.parse import quote

    log, out = _log()
    log.add_secret(secret)
    log.error("failed", error=f"ValueError({secret!r}) at {quote(secret, safe='')} and {quote(secret)}")
    line = out.getvalue()
    for form in (secret, repr(secret)[1:-1], quote(secret, safe=""), quote(secret)):
        assert form not in line and json.dumps(form)[1:-1] not in line


@pytest.mark.parametrize(
    "url,expected",
    [
        ("https://ghp_TOKEN123@github.com/o/r.git", ["ghp_TOKEN123"]),
        ("https://user:p%40ss-word@host/r.git", ["user", "p%40ss-word", "p@ss-word"]),
        ("http://AKIAKEY:SeCrEtKeY@minio:9000", ["AKIAKEY", "SeCrEtKeY"]),
        ("https://host/r.git", []),
        ("not a url", []),
        (None, []),
    ],
)
def test_url_credentials_register_username_tokens(url, expected):
    assert sorted(url_credentials(url)) == sorted(expected)


def test_unexpected_exception_is_printed_scrubbed(tmp_path, monkeypatch, capsys):
    secrets = tmp_path / "secrets" / "s3"
    secrets.mkdir(parents=True)
    secret = 'very"secret\\value-xyz'
    (secrets / "key").write_text(secret)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"s3": [{"endpointUrl": "http://AKIAUSERTOKEN:endpoint-pass@127.0.0.1:1",
                                       "accessKeyId": {"file": str(secrets / "key")},
                                       "secretKey": {"file": str(secrets / "key")},
                                       "buckets": [{"name": "b", "files": [{"path": "a", "targetPath": "a"}]}]}]}))
    monkeypatch.setenv("KAIWO_DOWNLOAD_SECRETS_DIR", str(tmp_path / "secrets"))

    def explode(*_a, **_k):
        raise RuntimeError(f"library said {secret!r} via http://AKIAUSERTOKEN:endpoint-pass@127.0.0.1:1")

    monkeypatch.setattr(download_main, "_plan", explode)
    code = download_main.main(["--config", str(cfg), "--data-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert code == 1
    record = json.loads(err.strip().splitlines()[-1])
    assert record["event"] == "failed" and "Traceback" in record["traceback"] and "RuntimeError" in record["error"]
    for leaked in (secret, repr(secret)[1:-1], "endpoint-pass", "AKIAUSERTOKEN"):
        assert leaked not in err


# --------------------------------------------------------------------------- path containment


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "a/../b", ".."])
def test_dotdot_is_refused(tmp_path, rel):
    with pytest.raises(ConfigError, match="escapes"):
        safe_join(tmp_path, rel)


def test_absolute_paths_count_from_the_root(tmp_path):
    assert safe_join(tmp_path, "/a/b") == tmp_path / "a" / "b"
    assert safe_join(tmp_path, "") == tmp_path


def test_symlinked_component_in_a_reused_volume_is_refused(tmp_path):
    root = tmp_path / "pvc"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "models").symlink_to(outside)
    with pytest.raises(ConfigError, match="symbolic link"):
        safe_join(root, "models/weights.bin")
    (root / "file").symlink_to(outside / "f")
    with pytest.raises(ConfigError, match="symbolic link"):
        safe_join(root, "file")
    # a relative symlink that stays inside is still refused: never follow
    (root / "inside").mkdir()
    (root / "alias").symlink_to("inside")
    with pytest.raises(ConfigError, match="symbolic link"):
        safe_join(root, "alias/x")
    assert safe_join(root, "inside/x") == root / "inside" / "x"


# --------------------------------------------------------------------------- secret files


def test_secret_files_only_from_the_secrets_dir(tmp_path, monkeypatch):
    secrets = tmp_path / "secrets"
    (secrets / "s").mkdir(parents=True)
    (secrets / "s" / "k").write_text("v-1234")
    monkeypatch.setenv("KAIWO_DOWNLOAD_SECRETS_DIR", str(secrets))
    assert read_secret(ValueReference(file=str(secrets / "s" / "k")), "x") == "v-1234"
    token = tmp_path / "token"
    token.write_text("service-account-token")
    for path in (str(token), str(secrets / ".." / "token"), "/etc/hostname",
                 "/var/run/secrets/kubernetes.io/serviceaccount/token"):
        with pytest.raises(ConfigError, match="not below the secrets directory"):
            read_secret(ValueReference(file=path), "git[0].token")
    # a symlink inside the secrets dir pointing out is refused too
    (secrets / "s" / "evil").symlink_to(token)
    with pytest.raises(ConfigError, match="not below"):
        read_secret(ValueReference(file=str(secrets / "s" / "evil")), "x")
    # Kubernetes' own layout (key -> ..data/key -> ..<ts>/key) resolves inside
    real = secrets / "m" / "..2026_01" / "k"
    real.parent.mkdir(parents=True)
    real.write_text("mounted-1234")
    os.symlink("..2026_01", secrets / "m" / "..data")
    os.symlink("..data/k", secrets / "m" / "k")
    assert read_secret(ValueReference(secret_name="m", secret_key="k", file=str(secrets / "m" / "k")), "x") == "mounted-1234"


def test_default_secret_path_with_dotdot_name_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("KAIWO_DOWNLOAD_SECRETS_DIR", str(tmp_path))
    with pytest.raises(ConfigError):
        read_secret(ValueReference(secret_name="..", secret_key="etc"), "x")
    assert Path(tmp_path).exists()
