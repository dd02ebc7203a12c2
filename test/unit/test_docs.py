"""The documentation stays true to the command line: every flag of
``kaiwo-ctrl run`` and ``kaiwo-ctrl proxy`` is documented in
docs/install-and-configure.md, with the environment variable it reads.

(The site itself is built with ``mkdocs build --strict`` by ./hack/test.sh,
which catches broken links and anchors.)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from kaiwo_ctrl.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
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
