"""User defaults for ``kaiwo`` and the order in which they apply.

A ``kaiwoconfig.yaml`` holds any of these keys::

    user: alice@example.com      # spec.user and the kaiwo.silogen.ai/user label
    clusterQueue: team-a         # spec.clusterQueue
    namespace: ml-team           # where workloads are created and listed
    image: ghcr.io/org/img:1.0   # spec.image when the workload sets none

Precedence, highest first:

1. command-line flags (``--user``, ``--queue``, ``-n``, ``-i`` ...);
2. the fields of the workload file given with ``-f`` (it names this workload);
3. ``kaiwoconfig.yaml`` in the workload directory given with ``-p``;
4. the user file: ``$KAIWOCONFIG``, else ``~/.config/kaiwo/kaiwoconfig.yaml``;
5. built-in defaults (namespace ``default``; the operator's default queue).

This module resolves layers 3 to 5; :mod:`.spec` applies layers 1 and 2.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import USAGE, CliError

CONFIG_ENV = "KAIWOCONFIG"
DEFAULT_CONFIG = Path("~/.config/kaiwo/kaiwoconfig.yaml")
CONFIG_FILE_NAME = "kaiwoconfig.yaml"
#: The keys a kaiwoconfig.yaml may hold, by their YAML name.
KEYS = ("user", "clusterQueue", "namespace", "image")
DEFAULT_NAMESPACE = "default"


@dataclass
class Defaults:
    """Resolved user defaults, with the source each value came from (for messages)."""

    user: str | None = None
    cluster_queue: str | None = None
    namespace: str = DEFAULT_NAMESPACE
    image: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def user_config_path(env: Mapping[str, str] | None = None) -> tuple[Path, bool]:
    """The user file and whether it was asked for explicitly (``$KAIWOCONFIG``)."""
    env = os.environ if env is None else env
    explicit = env.get(CONFIG_ENV)
    if explicit:
        return Path(explicit).expanduser(), True
    return DEFAULT_CONFIG.expanduser(), False


def read_config(path: Path, *, required: bool) -> tuple[dict[str, Any], list[str]]:
    """The known keys of one kaiwoconfig.yaml and warnings about the others.

    A missing file is empty unless ``required``; a file that is not a YAML
    mapping of strings is a usage error naming the file and the key.
    """
    if not path.is_file():
        if required:
            raise CliError(f"config file {path} (from ${CONFIG_ENV}) does not exist", USAGE)
        return {}, []
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise CliError(f"cannot read {path}: {e}", USAGE) from e
    if not isinstance(doc, dict):
        raise CliError(f"{path}: expected a mapping of {', '.join(KEYS)}", USAGE)
    out: dict[str, Any] = {}
    warnings = []
    for key, value in doc.items():
        if key not in KEYS:
            warnings.append(f"{path}: unknown key {key!r} ignored (known: {', '.join(KEYS)})")
            continue
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise CliError(f"{path}: {key} must be a non-empty string", USAGE)
        out[key] = value.strip()
    return out, warnings


def resolve(workload_dir: Path | None = None, env: Mapping[str, str] | None = None) -> Defaults:
    """Merge the user file and the workload directory's file (the directory wins)."""
    path, explicit = user_config_path(env)
    layers = [(str(path), *read_config(path, required=explicit))]
    if workload_dir is not None:
        dir_file = workload_dir / CONFIG_FILE_NAME
        layers.append((str(dir_file), *read_config(dir_file, required=False)))
    out = Defaults()
    attrs = {"user": "user", "clusterQueue": "cluster_queue", "namespace": "namespace", "image": "image"}
    for source, values, warnings in layers:
        out.warnings.extend(warnings)
        for key, value in values.items():
            setattr(out, attrs[key], value)
            out.sources[key] = source
    return out


def can_prompt() -> bool:
    """Only a person at a terminal is asked anything: stdin and stderr must both be terminals."""
    import sys

    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def first_run(ask: Any = None, env: Mapping[str, str] | None = None) -> Path | None:
    """Ask for ``user`` and ``clusterQueue`` and write the user file, the first time only.

    Returns the file written, or None when the user file already exists (it is never
    overwritten) or nobody is at a terminal.
    """
    import re
    import sys

    path, _ = user_config_path(env)
    if path.exists() or (ask is None and not can_prompt()):
        return None

    def prompt(text: str) -> str:
        sys.stderr.write(text)
        sys.stderr.flush()
        return (ask or input)("").strip()

    sys.stderr.write(f"kaiwo: no user config yet; creating {path} (edit it any time).\n")
    user = ""
    for _ in range(3):
        user = prompt("Your user name or e-mail (spec.user, labels your workloads): ")
        if user:
            break
    if not user:
        raise CliError("no user given; pass --user EMAIL or write 'user: EMAIL' into " + str(path), USAGE)
    queue = prompt("Kueue ClusterQueue to submit to (empty: the cluster's default): ")
    if queue and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", queue):
        raise CliError(f"{queue!r} is not a ClusterQueue name (lower-case letters, digits, '-' and '.')", USAGE)
    doc = {"user": user, **({"clusterQueue": queue} if queue else {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    sys.stderr.write(f"kaiwo: wrote {path}\n")
    return path
