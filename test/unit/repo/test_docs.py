"""The documentation stays true to the command line: every flag of
``kaiwo-ctrl run`` and ``kaiwo-ctrl proxy`` is documented in
docs/install-and-configure.md, with the environment variable it reads; and to
the tree: every repository path the README, docs/ and bench/RESULTS.md name in
code exists, every module they name in dotted form imports, and every file
kaiwo_ctrl/rbac.py's reasons name exists.

(The site itself is built with ``mkdocs build --strict`` by ./hack/test.sh,
which catches broken links and anchors.)
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from kaiwo_ctrl import rbac
from kaiwo_ctrl.cli import build_parser
from support import REPO

ROOT = REPO
PAGE = ROOT / "docs" / "install-and-configure.md"
CLI = ROOT / "kaiwo_ctrl" / "cli.py"
COMMAND = ROOT / "kaiwo_ctrl" / "serving" / "command.py"


def subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise AssertionError("kaiwo-ctrl has no subcommands")


def long_flags(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(
        opt for action in parser._actions for opt in action.option_strings if opt.startswith("--") and opt != "--help"
    )


def documented_flags(text: str) -> set[str]:
    """Flags named in code spans, e.g. `--workers` or `--workers=4`."""
    return set(re.findall(r"`(--[a-z0-9][a-z0-9-]*)", text))


@pytest.mark.parametrize("command", ["run", "proxy"])
def test_every_flag_is_documented(command: str) -> None:
    flags = long_flags(subcommand(command))
    assert len(flags) >= 8, flags  # the parser was found and has its flags
    missing = [f for f in flags if f not in documented_flags(PAGE.read_text())]
    assert not missing, f"kaiwo-ctrl {command} flags missing from {PAGE.relative_to(ROOT)}: {missing}"


def test_every_flag_environment_variable_is_documented() -> None:
    """The variables the flags read their defaults from (env("NAME", ...) /
    os.environ.get("NAME")) appear on the page too."""
    source = CLI.read_text() + COMMAND.read_text()
    names = set(re.findall(r"""(?:env|os\.environ\.get|_env_bool)\(\s*["']([A-Z][A-Z0-9_]+)["']""", source))
    assert {"LEADER_ELECT", "METRICS_BIND_ADDRESS", "PROXY_BIND_ADDRESS"} <= names, names
    text = PAGE.read_text()
    missing = sorted(n for n in names if not re.search(rf"`{n}[`=]", text))
    assert not missing, f"environment variables missing from {PAGE.relative_to(ROOT)}: {missing}"


def test_the_check_would_notice_a_missing_flag() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documented")
    parser.add_argument("--not-documented")
    assert [f for f in long_flags(parser) if f not in documented_flags("`--documented` does X")] == ["--not-documented"]


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_readme_links_resolve() -> None:
    """The README is not part of the MkDocs build, so its relative links (and their
    anchors) are checked here."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    relative = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert len(relative) >= 10, relative  # the README points into docs/ and bench/
    broken = []
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.is_file():
            broken.append(link)
        elif anchor:
            headings = re.findall(r"^#+\s+(.*)$", target.read_text(), flags=re.M)
            if anchor not in {_slug(h) for h in headings}:
                broken.append(link)
    assert not broken, f"README.md links to missing files or anchors: {broken}"


def test_slug_matches_the_anchors_mkdocs_makes() -> None:
    assert _slug("Migrating from KubeAI") == "migrating-from-kubeai"
    assert _slug("`kaiwo-ctrl run` flags") == "kaiwo-ctrl-run-flags"
    assert _slug("What is synced, and what is never touched") == "what-is-synced-and-what-is-never-touched"


# --- paths and module names the docs give exist -----------------------------

#: The pages that name the code: the README, the site and the benchmark results.
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "RESULTS.md")
PKG = ROOT / "kaiwo_ctrl"
#: A path is checked when it starts at a directory of the repository or at one of
#: kaiwo_ctrl's packages (`serving/routing/router.py` means kaiwo_ctrl/serving/...).
REPO_DIRS = ("kaiwo_ctrl", "api", "hack", "test", "e2e", "bench", "config", "docs", "charts")
PACKAGES = tuple(sorted(p.parent.name for p in PKG.glob("*/__init__.py")))
#: Paths the docs name in another project's tree, each with its page; they must
#: still be named there (or leave this list) and must not exist here.
ELSEWHERE = {
    "config/components/crd": "development.md (Kueue's kustomization)",
    "config/components/webhook": "development.md (Kueue's webhook configurations)",
}


def code_text(markdown: str) -> list[str]:
    """The text of every fenced code block and inline code span."""
    fence = re.compile(r"^ *(`{3,}|~{3,})[^\n]*\n(.*?)^ *\1", re.M | re.S)
    blocks = [m.group(2) for m in fence.finditer(markdown)]
    spans = re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", fence.sub("", markdown), re.S)
    return blocks + [m.group(2) for m in spans]


def named_paths(code: str) -> set[str]:
    """The repository paths in a piece of code: `./hack/test.sh`, `test/unit/x.py::test_y`,
    `serving/proxy/auth.py:42`, `docs/serving.md#proxying`, `bench/bench_*.py`; placeholders
    (`<name>`, `$X`) are not paths."""
    found = set()
    for token in re.split(r"[\s\"'(),;=\[\]]+", code):
        path = re.sub(r"(::.*|:\d.*|#.*|'s)$", "", token.removeprefix("./")).rstrip(".,:;")
        if "/" in path and path.split("/")[0] in REPO_DIRS + PACKAGES and not re.search(r"[<>{}$]", path):
            found.add(path)
    return found


def exists(path: str) -> bool:
    return any(any(base.glob(path.rstrip("/"))) if "*" in path else (base / path).exists() for base in (ROOT, PKG))


def missing_paths(markdown: str) -> list[str]:
    named = set().union(*map(named_paths, code_text(markdown)))
    return sorted(p for p in named if not exists(p) and p not in ELSEWHERE)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_the_docs_name_exists(page: Path) -> None:
    missing = missing_paths(page.read_text())
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist (moved?): {missing}"


def test_the_docs_name_paths_and_the_exceptions_are_still_needed() -> None:
    named: dict[str, set[str]] = {}
    for page in PAGES:
        for path in set().union(*map(named_paths, code_text(page.read_text()))):
            named.setdefault(path, set()).add(page.name)
    assert {"kaiwo_ctrl/rbac.py", "serving/model/controller.py", "bench/bench_proxy.py"} <= named.keys()
    assert len(named) >= 100, len(named)  # the scan finds the docs' paths
    for path, where in ELSEWHERE.items():
        assert where.split()[0] in named.get(path, set()) and not exists(path), (path, where)


def test_the_check_would_notice_a_missing_path() -> None:
    page = (
        "The router is `kaiwo_ctrl/serving/router.py` (moved), its scorer `serving/routing/score.py:12`,\n"
        "the tests `test/unit/repo/test_docs.py::test_slug_matches_the_anchors_mkdocs_makes` and `test/unit/repo/test_d*.py`;\n"
        "`./hack/lint.sh` checks, `model/status.py` is relative to serving/ (not checked), and ``<dir>/kwok/x``;\n"
        "see `docs/serving.md#proxying`, not `docs/proxy.md#auth`.\n"
        "```sh\n.venv/bin/python bench/bench_gone.py --out config/samples/\n```\n"
    )
    assert missing_paths(page) == ["bench/bench_gone.py", "docs/proxy.md", "kaiwo_ctrl/serving/router.py"]


def module_names(text: str) -> set[str]:
    """Dotted names the docs give: `kaiwo_ctrl.serving.routing.router` (a logger or a module)."""
    return set(re.findall(r"\bkaiwo_ctrl(?:\.[A-Za-z_]\w*)+", text))


def resolves(dotted: str) -> bool:
    """The name imports as a module, or is an attribute of the longest prefix that does."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_module_the_docs_name_imports() -> None:
    names = {name for page in PAGES for name in module_names(page.read_text())}
    assert "kaiwo_ctrl.runtime.cache.informer" in names, names  # the logger names in operations.md
    unresolved = sorted(n for n in names if not resolves(n))
    assert not unresolved, f"the docs name modules that do not import (moved?): {unresolved}"


def test_the_check_would_notice_a_module_that_moved() -> None:
    text = "filter `kaiwo_ctrl.serving.proxy.router` or `kaiwo_ctrl.serving.routing.router.Router`; see kaiwo_ctrl.rbac."
    names = module_names(text)
    assert names == {"kaiwo_ctrl.serving.proxy.router", "kaiwo_ctrl.serving.routing.router.Router", "kaiwo_ctrl.rbac"}
    assert sorted(n for n in names if not resolves(n)) == ["kaiwo_ctrl.serving.proxy.router"]


def test_every_file_the_rbac_reasons_name_exists() -> None:
    """The reasons in kaiwo_ctrl/rbac.py are written into config/rbac/role.yaml and the
    chart: every `module.py` they name is a file of kaiwo_ctrl."""
    whys = [rule.why for rules in (rbac.CLUSTER_RULES, rbac.LEADER_ELECTION_RULES, rbac.PROXY_CLUSTER_RULES,
                                   rbac.PROXY_NAMESPACE_RULES) for rule in rules]
    files = {f for why in whys for f in re.findall(r"[\w/]+\.py\b", why)}
    assert {"serving/model/controller.py", "nodes.py"} <= files, files
    missing = sorted(f for f in files if not (PKG / f).is_file())
    assert not missing, f"kaiwo_ctrl/rbac.py's reasons name files that do not exist (moved?): {missing}"
