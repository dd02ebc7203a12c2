"""Git repositories through the git CLI.

* ``branch`` set: shallow clone of that branch. Else ``commit`` set: shallow
  fetch of the commit (full fetch when the server refuses fetching by id).
  Else: shallow clone of the default branch.
* Credentials never touch the command line, the URL or ``.git/config``: git is
  run with ``GIT_ASKPASS`` pointing at a small helper that prints the contents
  of the mounted username/token files, whose *paths* it gets from the
  environment. Credential helpers and terminal prompts are disabled.
* The checkout is assembled in a hidden temporary directory next to the target
  and swapped in at the end, so the target is either the previous complete
  content or the new complete content.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit, urlunsplit

from api.kaiwo.download import GitDownloadItem

from .config import secret_file_path, url_credentials
from .objectstore import Context
from .placement import PARTIAL_MARKER, safe_join
from .transfer import (
    AuthError,
    ConfigError,
    DownloadError,
    NotFoundError,
    Task,
    TransientError,
    rate_fields,
    with_retries,
)

#: http.lowSpeedLimit / http.lowSpeedTime: abort a transfer slower than 1 KiB/s for a minute.
LOW_SPEED_LIMIT = 1024
LOW_SPEED_TIME = 60
#: Wall-clock limit of one git command (env KAIWO_GIT_TIMEOUT, seconds; default 2 h).
DEFAULT_GIT_TIMEOUT = 7200.0


def git_timeout() -> float:
    try:
        return max(float(os.environ.get("KAIWO_GIT_TIMEOUT", DEFAULT_GIT_TIMEOUT)), 1.0)
    except ValueError:
        return DEFAULT_GIT_TIMEOUT


_ASKPASS = """#!/bin/sh
case "$1" in
  Username*|username*)
    if [ -n "$KAIWO_GIT_USERNAME_FILE" ]; then cat "$KAIWO_GIT_USERNAME_FILE"; else printf '%s' "${KAIWO_GIT_DEFAULT_USERNAME:-x-access-token}"; fi ;;
  *)
    if [ -n "$KAIWO_GIT_TOKEN_FILE" ]; then cat "$KAIWO_GIT_TOKEN_FILE"; fi ;;
esac
"""

_AUTH_PATTERNS = re.compile(
    r"authentication failed|could not read (username|password)|terminal prompts disabled|"
    r"http basic: access denied|invalid username or password|permission denied|"
    r"\b401\b|\b403\b",
    re.IGNORECASE,
)
_NOT_FOUND_PATTERNS = re.compile(
    r"repository .* not found|not found|does not appear to be a git repository|"
    r"couldn't find remote ref|remote branch .* not found|no such remote ref|"
    r"not our ref|unadvertised object|did not match any|reference is not a tree|"
    r"does not exist|\b404\b",
    re.IGNORECASE,
)
_TRANSIENT_PATTERNS = re.compile(
    r"could not resolve host|connection refused|connection reset|connection timed out|timed out|"
    r"early eof|rpc failed|the remote end hung up|unexpected disconnect|\b50[0234]\b|"
    r"failed to connect|couldn't connect|empty reply|transfer closed",
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """Drop any user-info from a URL so it can be logged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


class GitJob:
    def __init__(self, item: GitDownloadItem, label: str, ctx: Context) -> None:
        self.item = item
        self.label = label
        self.ctx = ctx
        self.url = item.repository.strip()
        if not self.url:
            raise ConfigError(f"{label}: repository is empty")
        self.safe_url = redact_url(self.url)
        # Credentials embedded in the URL (a token is often the username) are the
        # user's choice; keep every part of them out of the logs.
        for value in url_credentials(self.url):
            ctx.log.add_secret(value)
        self.target = safe_join(ctx.data_dir, item.target_path or "")
        if self.target == ctx.data_dir and (item.target_path or "").strip() in ("", ".", "/"):
            raise ConfigError(f"{label}: targetPath must name a directory below the data root")
        self.name = f"{label} {self.safe_url}"

    # -------------------------------------------------------------- git plumbing

    def _env(self, helper: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            {
                "GIT_ASKPASS": str(helper),
                "SSH_ASKPASS": str(helper),
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_LFS_SKIP_SMUDGE": env.get("GIT_LFS_SKIP_SMUDGE", "0"),
            }
        )
        for key in ("KAIWO_GIT_USERNAME_FILE", "KAIWO_GIT_TOKEN_FILE"):
            env.pop(key, None)
        if self.item.username is not None:
            env["KAIWO_GIT_USERNAME_FILE"] = self._secret_path(self.item.username, "username")
        if self.item.token is not None:
            env["KAIWO_GIT_TOKEN_FILE"] = self._secret_path(self.item.token, "token")
        return env

    def _secret_path(self, ref, what: str) -> str:
        path = secret_file_path(ref, f"{self.label}.{what}")
        if not Path(path).is_file():
            raise ConfigError(f"{self.label}.{what}: secret file {path!r} does not exist (is the Secret mounted?)")
        return path

    def _git(self, args: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
        # A stalled server (below LOW_SPEED_LIMIT bytes/s for LOW_SPEED_TIME s)
        # aborts the transfer; a whole command is killed after GIT_TIMEOUT s.
        cmd = [
            "git",
            "-c", "credential.helper=",
            "-c", "core.askPass=" + env["GIT_ASKPASS"],
            "-c", f"http.lowSpeedLimit={LOW_SPEED_LIMIT}",
            "-c", f"http.lowSpeedTime={LOW_SPEED_TIME}",
            "-c", "core.symlinks=true",
            *args,
        ]  # fmt: skip
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=git_timeout())
        except subprocess.TimeoutExpired:
            raise TransientError(f"git {args[0]} of {self.safe_url} timed out after {git_timeout():.0f}s") from None
        if proc.returncode != 0:
            raise self._classify(proc.stderr, args[0])
        return proc.stdout

    def _classify(self, stderr: str, op: str) -> DownloadError:
        text = self.ctx.log.scrub(stderr.replace(self.url, self.safe_url))
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("hint:")]
        detail = " | ".join(lines[-3:])[:500] or f"git {op} failed"
        if _AUTH_PATTERNS.search(text):
            return AuthError(f"git authentication failed for {self.safe_url}: {detail}")
        if _TRANSIENT_PATTERNS.search(text):
            return TransientError(f"git {op} of {self.safe_url} failed: {detail}")
        if _NOT_FOUND_PATTERNS.search(text):
            return NotFoundError(f"git {op}: not found in {self.safe_url}: {detail}")
        return DownloadError(f"git {op} of {self.safe_url} failed: {detail}")

    # -------------------------------------------------------------- the task

    def run(self) -> None:
        log = self.ctx.log
        log.info("item_start", item=self.name, branch=self.item.branch, commit=self.item.commit, path=self.item.path, dest=str(self.target))
        import time

        started = time.monotonic()
        nbytes = with_retries(self._attempt, item=self.name, policy=self.ctx.policy, log=log)
        log.info("item_done", item=self.name, bytes=nbytes, dest=str(self.target), **rate_fields(nbytes, time.monotonic() - started))

    def _attempt(self) -> int:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        _clear_stale(self.target)
        work = Path(tempfile.mkdtemp(prefix=f".{self.target.name}{PARTIAL_MARKER}", dir=self.target.parent))
        try:
            with tempfile.TemporaryDirectory(prefix="kaiwo-git-askpass-") as hdir:
                helper = Path(hdir) / "askpass.sh"
                helper.write_text(_ASKPASS)
                helper.chmod(stat.S_IRWXU)
                env = self._env(helper)
                clone = work / "clone"
                self._checkout(clone, env)
            staged = self._stage(clone, work)
            nbytes = _tree_size(staged)
            _swap_into_place(staged, self.target, work)
            return nbytes
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _checkout(self, clone: Path, env: dict[str, str]) -> None:
        item = self.item
        if item.branch:
            self._git(["clone", "--quiet", "--depth", "1", "--single-branch", "--branch", item.branch, "--", self.url, str(clone)], env)
            return
        if not item.commit:
            self._git(["clone", "--quiet", "--depth", "1", "--", self.url, str(clone)], env)
            return
        commit = item.commit.strip()
        if not re.fullmatch(r"[0-9a-fA-F]{4,64}", commit):
            raise ConfigError(f"{self.label}: commit {commit!r} is not a hexadecimal commit id")
        self._git(["init", "--quiet", str(clone)], env)
        self._git(["remote", "add", "origin", self.url], env, cwd=clone)
        try:
            self._git(["fetch", "--quiet", "--depth", "1", "origin", commit], env, cwd=clone)
        except (NotFoundError, DownloadError) as exc:
            if isinstance(exc, (AuthError, TransientError)):
                raise
            # Servers may refuse fetching an id directly (or it is abbreviated): fetch everything.
            self._git(["fetch", "--quiet", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*"], env, cwd=clone)
        try:
            self._git(["-c", "advice.detachedHead=false", "checkout", "--quiet", commit], env, cwd=clone)
        except DownloadError as exc:
            if isinstance(exc, (AuthError, TransientError)):
                raise
            raise NotFoundError(f"commit {commit} not found in {self.safe_url}") from None

    def _stage(self, clone: Path, work: Path) -> Path:
        sub = (self.item.path or "").strip().strip("/")
        if not sub:
            if self.safe_url != self.url:
                # Credentials embedded in the URL must not stay in .git/config.
                subprocess.run(["git", "-C", str(clone), "remote", "set-url", "origin", self.safe_url], check=False, capture_output=True)
            return clone
        if ".git" in PurePosixPath(sub).parts:
            raise ConfigError(f"{self.label}: path {sub!r} is inside the repository's .git directory")
        # safe_join refuses '..' and any symlinked component (a repository can
        # hold 'weights -> /var/run/secrets/...'; copying it would copy the target).
        src = safe_join(clone, sub, what="path")
        if not src.exists():
            raise NotFoundError(f"path {sub!r} does not exist in {self.safe_url}")
        staged = work / "staged"
        if src.is_dir():
            shutil.copytree(src, staged, symlinks=True)
        else:
            shutil.copy2(src, staged)
        return staged


def _tree_size(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(p):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _clear_stale(target: Path) -> None:
    prefix = f".{target.name}{PARTIAL_MARKER}"
    for entry in target.parent.iterdir():
        if entry.name.startswith(prefix):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def _swap_into_place(staged: Path, target: Path, work: Path) -> None:
    """Replace ``target`` with ``staged``; the old content is moved into ``work`` (deleted later)."""
    if target.exists() or target.is_symlink():
        old = work / f"old-{uuid.uuid4().hex[:8]}"
        os.replace(target, old)
    os.replace(staged, target)


def plan(items: list[GitDownloadItem], ctx: Context, closers: list) -> list[Task]:
    if shutil.which("git") is None:
        raise ConfigError("git downloads need the git executable on PATH")
    tasks = []
    for i, item in enumerate(items):
        job = GitJob(item, f"git[{i}]", ctx)
        tasks.append(Task(item=job.name, run=job.run))
    return tasks
