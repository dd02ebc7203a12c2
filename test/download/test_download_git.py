"""Git downloads from a local bare repository over file:// and over smart HTTP
(``git http-backend`` behind a small CGI-running HTTP server on 127.0.0.1)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from dl_servers import make_git_http_server

GIT_USER = "kaiwo-bot"
GIT_TOKEN = "glpat-TestToken-0123456789abcdef"


def _git(*args, cwd=None):
    env = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _work_repo(tmp_path_factory, name: str) -> Path:
    """An empty working repository on branch main with a committer identity."""
    work = tmp_path_factory.mktemp(name)
    _git("init", "-q", "-b", "main", str(work))
    for k, v in {"user.name": "Test", "user.email": "t@example.com"}.items():
        _git("config", k, v, cwd=work)
    return work


@pytest.fixture(scope="module")
def git_repos(tmp_path_factory):
    """A project root with ``public/repo.git`` and ``private/repo.git`` (same content):
    main has two commits, branch ``feature`` one more."""
    root = tmp_path_factory.mktemp("gitroot")
    work = _work_repo(tmp_path_factory, "gitwork")
    (work / "README.md").write_text("v1\n")
    (work / "configs").mkdir()
    (work / "configs" / "train.yaml").write_text("lr: 0.1\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "first", cwd=work)
    first = _git("rev-parse", "HEAD", cwd=work)
    (work / "README.md").write_text("v2\n")
    (work / "configs" / "eval.yaml").write_text("k: 5\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "second", cwd=work)
    second = _git("rev-parse", "HEAD", cwd=work)
    _git("checkout", "-q", "-b", "feature", cwd=work)
    (work / "feature.txt").write_text("feature\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "feature", cwd=work)
    _git("checkout", "-q", "main", cwd=work)
    for sub in ("public", "private"):
        (root / sub).mkdir()
        _git("clone", "-q", "--bare", str(work), str(root / sub / "repo.git"))
        # Let clients fetch any reachable commit by id (like hosted forges do).
        _git("config", "uploadpack.allowReachableSHA1InWant", "true", cwd=root / sub / "repo.git")
    server = make_git_http_server(root, users={GIT_USER: GIT_TOKEN}).start()
    yield {"root": root, "first": first, "second": second, "http": server.url, "server": server}
    server.stop()


def test_file_url_default_branch_whole_repo(git_repos, run_download, tmp_path):
    url = (git_repos["root"] / "public" / "repo.git").as_uri()
    cfg = {"git": [{"repository": url, "targetPath": "src/repo"}]}
    data = tmp_path / "data"
    r = run_download(cfg, data_dir=data)
    assert r.code == 0, r.stderr
    assert (data / "src/repo/README.md").read_text() == "v2\n"
    assert (data / "src/repo/.git").is_dir()
    assert not (data / "src/repo/feature.txt").exists()
    assert r.by_event("item_done")[0]["bytes"] > 0
    # Re-running replaces the checkout atomically and leaves no temp dirs.
    r2 = run_download(cfg, data_dir=data)
    assert r2.code == 0, r2.stderr
    assert sorted(p.name for p in (data / "src").iterdir()) == ["repo"]


def test_file_url_branch_and_subpath(git_repos, run_download, tmp_path):
    url = (git_repos["root"] / "public" / "repo.git").as_uri()
    cfg = {
        "git": [
            {"repository": url, "branch": "feature", "targetPath": "feat"},
            {"repository": url, "branch": "main", "path": "configs", "targetPath": "cfg"},
            {"repository": url, "path": "configs/train.yaml", "targetPath": "one/train.yaml"},
        ]
    }
    data = tmp_path / "data"
    r = run_download(cfg, data_dir=data)
    assert r.code == 0, r.stderr
    assert (data / "feat/feature.txt").read_text() == "feature\n"
    assert sorted(p.name for p in (data / "cfg").iterdir()) == ["eval.yaml", "train.yaml"]
    assert (data / "one/train.yaml").read_text() == "lr: 0.1\n"


def test_commit_checkout(git_repos, run_download, tmp_path):
    url = (git_repos["root"] / "public" / "repo.git").as_uri()
    cfg = {"git": [{"repository": url, "commit": git_repos["first"], "targetPath": "old"}]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 0, r.stderr
    assert (tmp_path / "d/old/README.md").read_text() == "v1\n"
    assert not (tmp_path / "d/old/configs/eval.yaml").exists()


def test_commit_checkout_over_http(git_repos, run_download, tmp_path):
    cfg = {"git": [{"repository": f"{git_repos['http']}/public/repo.git", "commit": git_repos["first"], "targetPath": "old"}]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 0, r.stderr
    assert (tmp_path / "d/old/README.md").read_text() == "v1\n"


def test_http_private_with_token_never_leaks(git_repos, run_download, secret_file, tmp_path):
    # A git wrapper first on PATH records every argv the downloader uses.
    real_git = subprocess.run(["which", "git"], capture_output=True, text=True, check=True).stdout.strip()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argv_log = tmp_path / "git-argv.log"
    wrapper = bindir / "git"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{argv_log}"\nexec "{real_git}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)

    url = f"{git_repos['http']}/private/repo.git"
    cfg = {
        "git": [
            {
                "repository": url,
                "branch": "main",
                "username": secret_file("git-user", GIT_USER + "\n"),
                "token": secret_file("git-token", GIT_TOKEN + "\n"),
                "targetPath": "priv",
            }
        ]
    }
    data = tmp_path / "data"
    r = run_download(cfg, data_dir=data, env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    assert r.code == 0, r.stderr
    assert (data / "priv/README.md").read_text() == "v2\n"
    assert git_repos["server"].seen_auth, "the server never received credentials"
    assert GIT_TOKEN not in r.stderr
    assert GIT_TOKEN not in argv_log.read_text()
    assert argv_log.read_text().strip(), "wrapper was not used"
    git_dir_text = "".join(p.read_text(errors="replace") for p in (data / "priv/.git").rglob("*") if p.is_file() and p.stat().st_size < 1_000_000)
    assert GIT_TOKEN not in git_dir_text
    assert GIT_USER not in (data / "priv/.git/config").read_text()


def test_http_private_wrong_token_is_auth_failure(git_repos, run_download, secret_file, tmp_path):
    wrong = "glpat-WrongToken-zzzzzzzzzzzzzz"
    cfg = {
        "git": [
            {
                "repository": f"{git_repos['http']}/private/repo.git",
                "username": secret_file("u", GIT_USER),
                "token": secret_file("t", wrong),
                "targetPath": "priv",
            }
        ]
    }
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 3, r.stderr
    assert r.failed["kind"] == "auth"
    assert "private/repo.git" in r.failed["item"]
    assert wrong not in r.stderr
    assert not (tmp_path / "d/priv").exists()


def test_http_private_without_credentials_is_auth_failure(git_repos, run_download, tmp_path):
    cfg = {"git": [{"repository": f"{git_repos['http']}/private/repo.git", "targetPath": "priv"}]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 3, r.stderr


def test_missing_repo_branch_commit_path(git_repos, run_download, tmp_path):
    base = git_repos["root"] / "public" / "repo.git"
    cases = [
        {"repository": (git_repos["root"] / "public" / "nope.git").as_uri(), "targetPath": "x"},
        {"repository": f"{git_repos['http']}/public/nope.git", "targetPath": "x"},
        {"repository": base.as_uri(), "branch": "no-such-branch", "targetPath": "x"},
        {"repository": base.as_uri(), "commit": "0123456789abcdef0123456789abcdef01234567", "targetPath": "x"},
        {"repository": base.as_uri(), "path": "not/here", "targetPath": "x"},
    ]
    for case in cases:
        r = run_download({"git": [case]}, data_dir=tmp_path / "d")
        assert r.code == 4, (case, r.stderr)
        assert r.failed["kind"] == "not_found"
        assert not (tmp_path / "d/x").exists()


def test_unreachable_server_is_transient(run_download, tmp_path):
    from dl_servers import free_port

    cfg = {"git": [{"repository": f"http://127.0.0.1:{free_port()}/repo.git", "targetPath": "x"}]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 5, r.stderr
    assert len(r.by_event("retry")) == 2


def test_target_escaping_data_dir_is_config_error(git_repos, run_download, tmp_path):
    url = (git_repos["root"] / "public" / "repo.git").as_uri()
    r = run_download({"git": [{"repository": url, "targetPath": "../outside"}]}, data_dir=tmp_path / "d")
    assert r.code == 2, r.stderr
    assert not (tmp_path / "outside").exists()


def test_url_credentials_are_scrubbed(git_repos, run_download, tmp_path):
    url = git_repos["http"].replace("http://", f"http://{GIT_USER}:{GIT_TOKEN}@") + "/private/repo.git"
    r = run_download({"git": [{"repository": url, "targetPath": "p"}]}, data_dir=tmp_path / "d")
    assert r.code == 0, r.stderr
    assert GIT_TOKEN not in r.stderr
    assert GIT_TOKEN not in (tmp_path / "d/p/.git/config").read_text()


@pytest.fixture(scope="module")
def symlink_repo(tmp_path_factory):
    """A repository whose ``weights`` is a symlink to the ServiceAccount token dir."""
    work = _work_repo(tmp_path_factory, "symwork")
    (work / "weights").symlink_to("/var/run/secrets/kubernetes.io/serviceaccount")
    (work / "ok").mkdir()
    (work / "ok" / "a.txt").write_text("a\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "evil", cwd=work)
    bare = tmp_path_factory.mktemp("symbare") / "repo.git"
    _git("clone", "-q", "--bare", str(work), str(bare))
    return bare.as_uri()


@pytest.mark.parametrize("path", ["weights", "weights/token", ".git/config", ".git", "ok/../.git/config", "../x"])
def test_path_that_leaves_the_checkout_is_refused(symlink_repo, run_download, tmp_path, path):
    data = tmp_path / "data"
    r = run_download({"git": [{"repository": symlink_repo, "targetPath": "r", "path": path}]}, data_dir=data)
    assert r.code == 2, r.stderr
    assert not (data / "r").exists()


def test_whole_repo_and_plain_subpath_still_work(symlink_repo, run_download, tmp_path):
    data = tmp_path / "data"
    r = run_download({"git": [{"repository": symlink_repo, "targetPath": "r", "path": "ok"}]}, data_dir=data)
    assert r.code == 0, r.stderr
    assert (data / "r" / "a.txt").read_text() == "a\n"


def test_symlink_already_in_the_volume_is_not_followed(git_repos, run_download, tmp_path):
    data = tmp_path / "data"
    outside = tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (data / "src").symlink_to(outside)
    url = (git_repos["root"] / "public" / "repo.git").as_uri()
    r = run_download({"git": [{"repository": url, "targetPath": "src/repo"}]}, data_dir=data)
    assert r.code == 2, r.stderr
    assert list(outside.iterdir()) == []


def test_token_given_as_url_username_never_leaks(git_repos, run_download, tmp_path):
    url = git_repos["http"].replace("://", f"://{GIT_TOKEN}-wrong@") + "/private/repo.git"
    r = run_download({"git": [{"repository": url, "targetPath": "p"}]}, data_dir=tmp_path / "data")
    assert r.code != 0
    assert f"{GIT_TOKEN}-wrong" not in r.stderr
