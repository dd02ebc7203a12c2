"""The Containerfile: hadolint-clean, multi-stage, non-root, and its
ENTRYPOINT is the command the manager Deployment runs.

No container engine runs on the test machines, so the image itself is not
built here; these checks read the file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from support import REPO

ROOT = REPO
CONTAINERFILE = ROOT / "Containerfile"


def tool(name: str) -> str:
    exe = Path(sys.executable).parent / name
    found = str(exe) if exe.exists() else shutil.which(name)
    assert found, f"{name} not found: install the dev extras (pip install -e '.[dev]')"
    return found


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in CONTAINERFILE.read_text().splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        op, _, rest = buf.partition(" ")
        out.append((op.upper(), rest.strip()))
        buf = ""
    return out


def manager_container() -> dict:
    out = subprocess.run([tool("kubectl"), "kustomize", str(ROOT / "config" / "default")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    deps = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Deployment"]
    dep = next(d for d in deps if d["metadata"]["name"] == "kaiwo-controller-manager")
    return dep, next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")


def all_container_ports() -> set[int]:
    """Ports of every Deployment of config/default (the operator and the proxy run this image)."""
    out = subprocess.run([tool("kubectl"), "kustomize", str(ROOT / "config" / "default")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return {p["containerPort"] for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Deployment"
            for c in d["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}


def test_hadolint_finds_nothing():
    out = subprocess.run([tool("hadolint"), "--format", "json", str(CONTAINERFILE)], capture_output=True, text=True)
    findings = json.loads(out.stdout or "[]")
    assert out.returncode == 0 and findings == [], json.dumps(findings, indent=2) + out.stderr


def test_multi_stage_slim_python_non_root():
    ins = instructions()
    froms = [rest for op, rest in ins if op == "FROM"]
    assert len(froms) >= 2, "multi-stage build expected"
    args = dict(rest.split("=", 1) for op, rest in ins if op == "ARG" and "=" in rest)
    base = args.get("PYTHON_IMAGE", "")
    assert base.startswith("python:") and "slim" in base
    # the final stage installs from the wheels built in the first one, offline
    final = ins[max(i for i, (op, _) in enumerate(ins) if op == "FROM") :]
    runs = " ".join(rest for op, rest in final if op == "RUN")
    assert "--no-index" in runs and "--find-links /wheels" in runs
    assert any(op == "COPY" and rest.startswith("--from=build /wheels") for op, rest in final)
    users = [rest for op, rest in final if op == "USER"]
    assert users, "the final stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric non-root UID (runAsNonRoot can only verify numbers)"


def test_pinned_version_is_the_project_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f'"kaiwo-ctrl[download]=={version}"' in CONTAINERFILE.read_text()


def test_entrypoint_matches_the_manager_deployment():
    ins = instructions()
    entry = json.loads([rest for op, rest in ins if op == "ENTRYPOINT"][-1])
    assert entry == ["kaiwo-ctrl", "run"]
    dep, c = manager_container()
    assert c["command"] == entry
    # the Pod runs with the image's UID
    uid = int([rest for op, rest in ins if op == "USER"][-1].split(":")[0])
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == uid
    # the installed console script is the one the entrypoint names
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[entry[0]] == "kaiwo_ctrl.cli:main"
    # the exposed ports are the Deployments' (the operator's and the proxy's, one image)
    exposed = {int(p) for op, rest in ins if op == "EXPOSE" for p in rest.split()}
    assert exposed == all_container_ports()


def test_build_context_ignore_files():
    ignore = (ROOT / ".containerignore").read_text()
    assert (ROOT / ".dockerignore").read_text() == ignore
    copied = [rest.split()[0] for op, rest in instructions() if op == "COPY" and not rest.startswith("--from")]
    for src in copied:
        name = src.rstrip("*").rstrip("/")
        assert f"!{name}" in ignore or f"!{name}/" in ignore, f"{src} is excluded from the build context"


def test_final_stage_installs_git_for_the_download_jobs():
    """Git downloads shell out to ``git``: the final stage must install it (as
    root, before USER) and the build must prove it runs (``git --version``)."""
    ins = instructions()
    start = max(i for i, (op, _) in enumerate(ins) if op == "FROM")
    final = ins[start:]
    user_at = max(i for i, (op, _) in enumerate(final) if op == "USER")
    installs = [i for i, (op, rest) in enumerate(final) if op == "RUN" and "apt-get install" in rest]
    assert installs, "the final stage installs no packages"
    i = installs[0]
    run = final[i][1]
    assert i < user_at, "packages must be installed before switching to the non-root user"
    steps = [s.strip() for s in run.split("&&")]
    assert steps[0] == "apt-get update"
    install = next(s for s in steps if s.startswith("apt-get install"))
    assert "git" in install.split() and "-y" in install.split()
    assert "rm -rf /var/lib/apt/lists/*" in steps
    assert steps[-1] == "git --version", "the build must fail when git cannot run"
