"""Build a KaiwoJob or KaiwoService from flags, a workload file and a workload directory.

Pure functions: nothing here talks to the cluster, so all of it is unit-tested.
Precedence (see :mod:`.config`): flags > the ``-f`` file's own fields >
the workload directory > the user's kaiwoconfig.yaml.

A workload directory (``-p DIR``) may hold:

* ``entrypoint``: the command or script run by the main container;
* ``env``: environment variables, ``KEY=VALUE`` lines or a YAML list of
  Kubernetes EnvVar entries (``valueFrom`` included);
* ``kaiwoconfig.yaml``: user defaults (see :mod:`.config`).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from api.kaiwo.v1alpha1 import API_VERSION, LABEL_KEY_PATTERN, KaiwoJob, KaiwoService
from api.meta import DURATION_PATTERN
from kaiwo_ctrl.runtime.objects.quantity import QuantityError, parse_quantity
from kaiwo_ctrl.workloads.base.labels import LABEL_USER
from kaiwo_ctrl.workloads.base.naming import rfc1123_normalize

from .config import Defaults
from .errors import USAGE, CliError

MODELS: dict[str, type[KaiwoJob] | type[KaiwoService]] = {"KaiwoJob": KaiwoJob, "KaiwoService": KaiwoService}
ENTRYPOINT_FILE = "entrypoint"
#: ``-f`` names that mean standard input.
STDIN_NAMES = ("-", "--")
ENV_FILE = "env"
#: Room left in a generated name for the operator's child suffixes (``-data``, ``-download``...).
GENERATED_NAME_MAX = 40
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


@dataclass
class SubmitFlags:
    """What ``kaiwo submit`` was given on the command line (None: not given)."""

    service: bool = False
    file: Path | None = None
    workload_dir: Path | None = None
    name: str | None = None
    namespace: str | None = None
    user: str | None = None
    image: str | None = None
    gpus: int | None = None
    gpus_per_replica: int | None = None
    replicas: int | None = None
    gpu_vendor: str | None = None
    ray: bool = False
    queue: str | None = None
    priority_class: str | None = None
    duration: str | None = None
    storage: str | None = None
    env: list[str] = field(default_factory=list)
    env_file: Path | None = None
    entrypoint: str | None = None
    entrypoint_file: Path | None = None
    labels: list[str] = field(default_factory=list)


def build_workload(flags: SubmitFlags, defaults: Defaults, short_id: str | None = None) -> dict[str, Any]:
    """The workload to create, as a dict; raises :class:`CliError` (exit 2) on bad input."""
    obj = load_workload_file(flags.file) if flags.file else _empty("KaiwoService" if flags.service else "KaiwoJob")
    if flags.service and obj["kind"] != "KaiwoService":
        raise CliError(f"{flags.file} holds a {obj['kind']}, but --service asks for a KaiwoService", USAGE)
    meta, spec = obj["metadata"], obj["spec"]
    if flags.workload_dir is not None:
        _apply_dir(spec, flags.workload_dir)
    _fill_defaults(meta, spec, defaults)
    _apply_flags(meta, spec, flags)
    user = spec.get("user")
    if not user:
        raise CliError(
            "no user: pass --user EMAIL, or put 'user: EMAIL' in ~/.config/kaiwo/kaiwoconfig.yaml "
            "(or the file $KAIWOCONFIG names)",
            USAGE,
        )
    if not meta.get("name") and not meta.get("generateName"):
        meta["name"] = generated_name(user, short_id)
    labels = meta.setdefault("labels", {})
    # The operator labels everything it creates with the same sanitised user.
    labels[LABEL_USER] = rfc1123_normalize(user)
    labels.update(parse_labels(flags.labels))
    validate(obj)
    return obj


def _empty(kind: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {}, "spec": {}}


def load_workload_file(path: Path) -> dict[str, Any]:
    """One KaiwoJob or KaiwoService from a YAML or JSON file ("-" or "--" reads stdin)."""
    import sys

    from_stdin = str(path) in STDIN_NAMES
    if from_stdin:
        path = Path("<stdin>")  # only for messages
    try:
        text = sys.stdin.read() if from_stdin else Path(path).read_text()
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        raise CliError(f"cannot read {path}: {e}", USAGE) from e
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise CliError(f"{path}: expected exactly one KaiwoJob or KaiwoService document, found {len(docs)}", USAGE)
    obj = docs[0]
    if obj.get("kind") not in MODELS:
        raise CliError(f"{path}: kind must be KaiwoJob or KaiwoService, not {obj.get('kind')!r}", USAGE)
    if obj.get("apiVersion", API_VERSION) != API_VERSION:
        raise CliError(f"{path}: apiVersion must be {API_VERSION}, not {obj.get('apiVersion')!r}", USAGE)
    obj["apiVersion"] = API_VERSION
    if not isinstance(obj.get("metadata") or {}, dict) or not isinstance(obj.get("spec") or {}, dict):
        raise CliError(f"{path}: metadata and spec must be mappings", USAGE)
    obj["metadata"] = dict(obj.get("metadata") or {})
    obj["spec"] = dict(obj.get("spec") or {})
    return obj


def _apply_dir(spec: dict[str, Any], directory: Path) -> None:
    """Directory files fill only what the workload file left empty."""
    if not directory.is_dir():
        raise CliError(f"workload directory {directory} does not exist", USAGE)
    entry = directory / ENTRYPOINT_FILE
    if entry.is_file() and not spec.get("entrypoint"):
        spec["entrypoint"] = read_text(entry)
    env = directory / ENV_FILE
    if env.is_file():
        spec["env"] = merge_env(parse_env_file(env), spec.get("env") or [])


def _fill_defaults(meta: dict[str, Any], spec: dict[str, Any], d: Defaults) -> None:
    if not spec.get("user") and d.user:
        spec["user"] = d.user
    if not spec.get("clusterQueue") and d.cluster_queue:
        spec["clusterQueue"] = d.cluster_queue
    if not spec.get("image") and d.image:
        spec["image"] = d.image
    if not meta.get("namespace"):
        meta["namespace"] = d.namespace


def _apply_flags(meta: dict[str, Any], spec: dict[str, Any], f: SubmitFlags) -> None:
    simple = {
        "user": f.user,
        "image": f.image,
        "gpus": f.gpus,
        "gpusPerReplica": f.gpus_per_replica,
        "replicas": f.replicas,
        "gpuVendor": f.gpu_vendor,
        "clusterQueue": f.queue,
        "priorityClass": f.priority_class,
        "duration": check_duration(f.duration) if f.duration else None,
    }
    spec.update({k: v for k, v in simple.items() if v is not None})
    if f.ray:
        spec["ray"] = True
    if f.storage:
        spec["storage"] = parse_storage(f.storage, spec.get("storage"))
    if f.entrypoint is not None and f.entrypoint_file is not None:
        raise CliError("give either --entrypoint or --entrypoint-file, not both", USAGE)
    if f.entrypoint is not None:
        spec["entrypoint"] = f.entrypoint
    elif f.entrypoint_file is not None:
        spec["entrypoint"] = read_text(f.entrypoint_file)
    flag_env: list[dict[str, Any]] = parse_env_file(f.env_file) if f.env_file else []
    flag_env = merge_env(flag_env, [parse_env_pair(e) for e in f.env])
    if flag_env:
        spec["env"] = merge_env(spec.get("env") or [], flag_env)
    if f.namespace:
        meta["namespace"] = f.namespace
    if f.name:
        meta["name"] = f.name
        meta.pop("generateName", None)


def generated_name(user: str, short_id: str | None = None) -> str:
    """``<user's local part>-<6 hex>``, a valid DNS label with room for child suffixes."""
    local = rfc1123_normalize(user.split("@", 1)[0]).replace(".", "-") or "kaiwo"
    short_id = short_id or uuid.uuid4().hex[:6]
    return f"{local[: GENERATED_NAME_MAX - len(short_id) - 1].rstrip('-')}-{short_id}"


def read_text(path: Path) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}", USAGE) from e


def parse_env_pair(text: str) -> dict[str, str]:
    """``KEY=VALUE`` (the value may contain ``=`` and be empty)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not _ENV_NAME.match(key):
        raise CliError(f"-e {text!r}: expected KEY=VALUE with a valid variable name", USAGE)
    return {"name": key, "value": value}


def parse_env_file(path: Path) -> list[dict[str, Any]]:
    """``KEY=VALUE`` lines (``#`` comments, blank lines, optional ``export``, quotes
    stripped), or a YAML list of EnvVar entries."""
    text = read_text(path)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        doc = None
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise CliError(f"{path}: item {i} must be an EnvVar with a name", USAGE)
        return doc
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        try:
            item = parse_env_pair(line)
        except CliError:
            raise CliError(f"{path}:{n}: expected KEY=VALUE, got {raw.strip()!r}", USAGE) from None
        value = item["value"].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out.append({"name": item["name"], "value": value})
    return out


def merge_env(low: list[dict[str, Any]], high: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Env lists merged by name: ``high`` wins, order of first appearance kept."""
    merged: dict[str, dict[str, Any]] = {e["name"]: e for e in low}
    for e in high:
        merged[e["name"]] = e
    return list(merged.values())


def parse_storage(text: str, current: dict[str, Any] | None) -> dict[str, Any]:
    """``SIZE[:CLASS]``: a data PVC of SIZE, of StorageClass CLASS when given."""
    size, _, klass = text.partition(":")
    try:
        if parse_quantity(size.strip()) <= 0:
            raise QuantityError(size)
    except (QuantityError, ValueError):
        raise CliError(f"--storage {text!r}: SIZE must be a positive quantity such as 100Gi", USAGE) from None
    storage = dict(current or {})
    storage["storageEnabled"] = True
    storage["data"] = {**(storage.get("data") or {}), "storageSize": size.strip()}
    if klass.strip():
        storage["storageClassName"] = klass.strip()
    return storage


def check_duration(text: str) -> str:
    if not re.match(DURATION_PATTERN, text):
        raise CliError(f"--duration {text!r}: expected a duration such as 90m or 1h30m", USAGE)
    return text


def parse_labels(pairs: list[str]) -> dict[str, str]:
    out = {}
    for text in pairs:
        key, sep, value = text.partition("=")
        if not sep or not re.match(LABEL_KEY_PATTERN, key) or len(key.rsplit("/", 1)[-1]) > 63:
            raise CliError(f"--label {text!r}: expected KEY=VALUE with a valid label key", USAGE)
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            raise CliError(
                f"--label {text!r}: a label value has at most 63 characters [A-Za-z0-9-_.], "
                "beginning and ending with a letter or digit",
                USAGE,
            )
        out[key] = value
    return out


def validate(obj: dict[str, Any]) -> None:
    """Check the workload against the typed API model; the message names the field."""
    try:
        MODELS[obj["kind"]].model_validate(obj)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CliError(f"invalid {obj['kind']}: {where}: {first['msg']}", USAGE) from None
