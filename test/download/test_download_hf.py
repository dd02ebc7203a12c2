"""Hugging Face pre-caching against a local Hub-compatible server (HF_ENDPOINT)."""

from __future__ import annotations

import os

import pytest
from dl_servers import HubRepo, make_hf_server

HF_TOKEN = "hf_LocalTestToken0123456789abcdefXYZ"

PUBLIC_FILES = {
    "config.json": b'{"model_type": "tiny"}',
    "model.safetensors": os.urandom(700_000),
    "tokenizer/tokenizer.json": b'{"version": "1.0"}',
}
PRIVATE_FILES = {"weights.bin": os.urandom(50_000), "README.md": b"# private\n"}


@pytest.fixture(scope="module")
def hub():
    server = make_hf_server(
        [
            HubRepo("kaiwo/tiny-model", PUBLIC_FILES),
            HubRepo("kaiwo/private-model", PRIVATE_FILES, token=HF_TOKEN),
        ]
    ).start()
    yield server
    server.stop()


def _env(hub):
    return {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_ETAG_TIMEOUT": "5"}


def _snapshot_dir(hf_dir, repo_id):
    base = hf_dir / "hub" / ("models--" + repo_id.replace("/", "--"))
    commit = (base / "refs" / "main").read_text().strip()
    return base / "snapshots" / commit


def test_whole_repo_into_hf_home_layout(hub, run_download, tmp_path):
    hf_dir = tmp_path / "hf"
    r = run_download({"hf": [{"repoId": "kaiwo/tiny-model"}]}, hf_dir=hf_dir, env=_env(hub))
    assert r.code == 0, r.stderr
    snap = _snapshot_dir(hf_dir, "kaiwo/tiny-model")
    for name, body in PUBLIC_FILES.items():
        assert (snap / name).read_bytes() == body
    assert not list((hf_dir / "hub").rglob("*.incomplete"))
    done = r.by_event("item_done")[0]
    assert done["bytes"] == sum(len(b) for b in PUBLIC_FILES.values())
    assert done["rate_bps"] > 0

    # The cache is usable offline by the workload, exactly as HF_HOME=<hf-dir> would see it.
    import subprocess
    import sys

    code = (
        "from huggingface_hub import hf_hub_download; "
        "print(hf_hub_download('kaiwo/tiny-model', 'config.json'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, HF_HOME=str(hf_dir), HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("config.json")

    # A re-run downloads nothing new.
    before = len(hub.requests_seen)
    r2 = run_download({"hf": [{"repoId": "kaiwo/tiny-model"}]}, hf_dir=hf_dir, env=_env(hub))
    assert r2.code == 0, r2.stderr
    assert not [q for q in hub.requests_seen[before:] if q.startswith("GET") and "/resolve/" in q]


def test_specific_files_with_token_from_file(hub, run_download, secret_file, tmp_path):
    hf_dir = tmp_path / "hf"
    cfg = {"huggingFace": [{"repoId": "kaiwo/private-model", "files": ["weights.bin"], "token": secret_file("hf", HF_TOKEN)}]}
    r = run_download(cfg, hf_dir=hf_dir, env=_env(hub))
    assert r.code == 0, r.stderr
    snap = _snapshot_dir(hf_dir, "kaiwo/private-model")
    assert (snap / "weights.bin").read_bytes() == PRIVATE_FILES["weights.bin"]
    assert not (snap / "README.md").exists()
    assert HF_TOKEN not in r.stderr
    assert r.by_event("file_done")[0]["bytes"] == len(PRIVATE_FILES["weights.bin"])


def test_token_from_environment(hub, run_download, tmp_path):
    r = run_download({"hf": [{"repoId": "kaiwo/private-model"}]}, hf_dir=tmp_path / "hf", env={**_env(hub), "HF_TOKEN": HF_TOKEN})
    assert r.code == 0, r.stderr
    assert HF_TOKEN not in r.stderr


def test_wrong_token_is_auth_failure(hub, run_download, secret_file, tmp_path):
    wrong = "hf_WrongTokenValue_abcdefghijklmnop"
    cfg = {"hf": [{"repoId": "kaiwo/private-model", "token": secret_file("hf", wrong)}]}
    r = run_download(cfg, hf_dir=tmp_path / "hf", env=_env(hub))
    assert r.code == 3, r.stderr
    assert r.failed["kind"] == "auth"
    assert "kaiwo/private-model" in r.failed["item"]
    assert wrong not in r.stderr


def test_unknown_repo_and_missing_file(hub, run_download, tmp_path):
    r = run_download({"hf": [{"repoId": "kaiwo/does-not-exist"}]}, hf_dir=tmp_path / "hf", env=_env(hub))
    assert r.code == 4, r.stderr
    assert "kaiwo/does-not-exist" in r.failed["item"]
    assert "not found" in r.failed["error"]

    r = run_download({"hf": [{"repoId": "kaiwo/tiny-model", "files": ["config.json", "nope.bin"]}]}, hf_dir=tmp_path / "hf", env=_env(hub))
    assert r.code == 4, r.stderr
    assert r.failed["item"].endswith("nope.bin")


def test_hub_unreachable_is_transient(run_download, tmp_path):
    from dl_servers import free_port

    env = {"HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", "HF_HUB_DISABLE_XET": "1", "HF_HUB_ETAG_TIMEOUT": "2"}
    # huggingface_hub already retries connection errors itself (about 20 s of backoff),
    # so one attempt of ours is enough to see the final classification.
    r = run_download(
        {"hf": [{"repoId": "kaiwo/tiny-model", "files": ["config.json"]}]}, hf_dir=tmp_path / "hf", env=env, extra=["--retries", "1"]
    )
    assert r.code == 5, r.stderr
    assert r.failed["kind"] == "transient"
    assert "config.json" in r.failed["item"]
