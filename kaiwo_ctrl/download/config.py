"""The download configuration file: the one definition of its format.

The reconciler writes it into the download ConfigMap (key ``config.yaml``) with
:meth:`DownloadConfig.build` + :meth:`DownloadConfig.to_config_yaml`; the
download program reads it with :meth:`DownloadConfig.from_file`.

Shape (camelCase keys, as in the API)::

    downloadRoot: /workload        # "" when no data volume
    hfHome: /hf_cache              # "" when no HF cache volume
    s3:        [S3DownloadItem...]
    gcs:       [GCSDownloadItem...]
    azureBlob: [AzureBlobStorageDownloadItem...]
    git:       [GitDownloadItem...]
    hf:        [HuggingFaceDownloadItem...]   # "huggingFace" is accepted as a synonym when reading

Every ValueReference carries ``file``: the path where the secret value is
mounted in the download container (``/app/secrets/<secretName>/<secretKey>``
unless given explicitly). JSON is accepted too (it is YAML).

The models are the API's own (``api.kaiwo.download``); this module only adds
the reading/writing helpers and one optional extension: a Hugging Face item may
name a ``token`` ValueReference (otherwise ``HF_TOKEN`` from the environment is
used, which is how ``spec.env`` reaches the Job).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices, Field, ValidationError

from api.fields import field
from api.kaiwo.download import (
    AzureBlobStorageDownloadItem,
    DownloadTaskConfig,
    GCSDownloadItem,
    GitDownloadItem,
    HuggingFaceDownloadItem,
    ObjectStorageDownloadSpec,
    S3DownloadItem,
    SECRETS_MOUNT_ROOT,
    ValueReference,
)

from .transfer import ConfigError

__all__ = ["DownloadConfig", "HuggingFaceTask", "ValueReference", "SecretRef"]

DEFAULT_DATA_DIR = "/workload"
DEFAULT_HF_DIR = "/hf_cache"
#: Secret values are only ever read from below this directory (where the
#: download Job mounts its Secrets), so a ``file`` reference cannot name the
#: pod's ServiceAccount token or any other file and send it to a server.
SECRETS_DIR_ENV = "KAIWO_DOWNLOAD_SECRETS_DIR"
DEFAULT_SECRETS_DIR = SECRETS_MOUNT_ROOT


def secrets_dir() -> str:
    return os.environ.get(SECRETS_DIR_ENV) or DEFAULT_SECRETS_DIR


class HuggingFaceTask(HuggingFaceDownloadItem):
    """A Hugging Face item as the download program reads it: the API item plus
    an optional ``token`` ValueReference."""

    token: ValueReference | None = field(
        None, description="Optional Secret reference holding a Hugging Face token; HF_TOKEN from the environment otherwise."
    )


SecretRef = tuple[str, str]


class DownloadConfig(DownloadTaskConfig):
    """The file format of ``kaiwo-ctrl download --config``."""

    # narrowed to the item type that also reads ``token``; pydantic validates the
    # subclass, mypy objects only because a list attribute could be assigned
    hf: list[HuggingFaceTask] | None = Field(  # type: ignore[assignment]
        default=None,
        validation_alias=AliasChoices("hf", "huggingFace", "hugging_face"),
        serialization_alias="hf",
        description="Hugging Face pre-cache tasks.",
    )

    # ------------------------------------------------------------------ building

    @classmethod
    def build(
        cls,
        *,
        download_root: str = "",
        hf_home: str = "",
        data_download: ObjectStorageDownloadSpec | None = None,
        hf_repos: Iterable[HuggingFaceDownloadItem] | None = None,
    ) -> DownloadConfig:
        """Assemble the document the controller writes into the download ConfigMap.

        Copies the items and fills ``file`` of every ValueReference whose file
        is empty with ``/app/secrets/<secretName>/<secretKey>``: for S3 both
        ``accessKeyId`` and ``secretKey`` only when at least one of them names a
        secret (unauthenticated S3 otherwise); GCS ``applicationCredentials`` and
        Azure ``connectionString`` always; Git ``username``/``token`` when present.
        """
        spec = data_download.model_copy(deep=True) if data_download is not None else ObjectStorageDownloadSpec()
        hf = [HuggingFaceTask.model_validate(r.model_dump(by_alias=True)) for r in (hf_repos or [])]
        cfg = cls(
            download_root=download_root,
            hf_home=hf_home,
            s3=spec.s3 or None,
            gcs=spec.gcs or None,
            azure_blob=spec.azure_blob or None,
            git=spec.git or None,
            hf=hf or None,
        )
        for ref in cfg._refs_needing_files():
            if not ref.file:
                ref.file = ref.default_file_path()
        return cfg

    def _refs_needing_files(self) -> Iterator[ValueReference]:
        for s3 in self.s3 or []:
            refs = [r for r in (s3.access_key_id, s3.secret_key) if r is not None]
            if any(r.secret_name for r in refs):
                yield from refs
        for gcs in self.gcs or []:
            if gcs.application_credentials is not None:
                yield gcs.application_credentials
        for az in self.azure_blob or []:
            if az.connection_string is not None:
                yield az.connection_string
        for g in self.git or []:
            for r in (g.username, g.token):
                if r is not None:
                    yield r
        for h in self.hf or []:
            if h.token is not None:
                yield h.token

    def secret_refs(self) -> list[SecretRef]:
        """Distinct ``(secretName, secretKey)`` pairs the download Job must mount
        (in first-use order), for the ``secret-<name>`` volumes of the download Job."""
        seen: dict[SecretRef, None] = {}
        for ref in self._refs_needing_files():
            if ref.secret_name and ref.secret_key:
                seen.setdefault((ref.secret_name, ref.secret_key), None)
        return list(seen)

    def value_references(self) -> list[tuple[str, ValueReference]]:
        """Every ValueReference the program will read, with a label naming its place."""
        out: list[tuple[str, ValueReference]] = []
        for i, s3 in enumerate(self.s3 or []):
            if s3.access_key_id is not None:
                out.append((f"s3[{i}].accessKeyId", s3.access_key_id))
            if s3.secret_key is not None:
                out.append((f"s3[{i}].secretKey", s3.secret_key))
        for i, gcs in enumerate(self.gcs or []):
            out.append((f"gcs[{i}].applicationCredentials", gcs.application_credentials))
        for i, az in enumerate(self.azure_blob or []):
            out.append((f"azureBlob[{i}].connectionString", az.connection_string))
        for i, g in enumerate(self.git or []):
            if g.username is not None:
                out.append((f"git[{i}].username", g.username))
            if g.token is not None:
                out.append((f"git[{i}].token", g.token))
        for i, h in enumerate(self.hf or []):
            if h.token is not None:
                out.append((f"hf[{i}].token", h.token))
        return out

    def is_empty(self) -> bool:
        return not (self.s3 or self.gcs or self.azure_blob or self.git or self.hf)

    # ------------------------------------------------------------------ (de)serialising

    def to_dict(self) -> dict[str, Any]:
        """The ConfigMap document: ``downloadRoot``/``hfHome`` always present, empty lists omitted."""
        doc = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        out: dict[str, Any] = {"downloadRoot": self.download_root or "", "hfHome": self.hf_home or ""}
        for key in ("s3", "gcs", "azureBlob", "git", "hf"):
            if doc.get(key):
                out[key] = doc[key]
        return out

    def to_config_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_text(cls, text: str, *, source: str = "<config>") -> DownloadConfig:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML/JSON: {exc}") from None
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise ConfigError(f"{source}: top level must be a mapping, got {type(doc).__name__}")
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False, include_input=False)
            )
            raise ConfigError(f"{source}: invalid download config: {problems}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> DownloadConfig:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {str(p)!r} not found") from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {str(p)!r}: {exc.strerror}") from None
        return cls.from_text(text, source=str(p))


def secret_file_path(ref: ValueReference, label: str, root: str | None = None) -> str:
    """The file a ValueReference names, required to resolve below the secrets
    directory (``root``, default :func:`secrets_dir`). Kubernetes mounts Secret
    keys as symlinks into a hidden directory of the same mount, so the check is
    on the resolved path."""
    path = ref.file or (ref.default_file_path() if ref.secret_name and ref.secret_key else "")
    if not path:
        raise ConfigError(f"{label}: value reference has neither file nor secretName/secretKey")
    base = os.path.realpath(root or secrets_dir())
    real = os.path.realpath(path)
    if not real.startswith(base.rstrip("/") + "/"):
        raise ConfigError(f"{label}: secret file {path!r} is not below the secrets directory {base!r}")
    return path


def read_secret(ref: ValueReference, label: str) -> str:
    """Read a mounted secret value. Errors name the file, never the content."""
    path = secret_file_path(ref, label)
    try:
        value = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{label}: secret file {path!r} does not exist (is the Secret mounted?)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{label}: cannot read secret file {path!r}: {type(exc).__name__}") from None
    return value.strip()


def url_credentials(url: str | None) -> list[str]:
    """The user-info parts (username and password) embedded in a URL such as
    ``https://TOKEN@host/repo.git`` or ``http://key:secret@minio:9000``; a
    token is often given as the username."""
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit((url or "").strip())
    except ValueError:
        return []
    return [v for raw in (parts.username, parts.password) if raw for v in {raw, unquote(raw)}]


def secret_fragments(value: str) -> list[str]:
    """The whole secret plus the parts of it that could appear on their own in
    an error message: each line, the key material inside a service-account JSON,
    and the key/signature fields of an Azure connection string."""
    out = [value, *value.splitlines()]
    try:
        doc = json.loads(value)
    except (json.JSONDecodeError, TypeError):
        doc = None
    if isinstance(doc, dict):
        for key in ("private_key", "private_key_id", "client_secret", "refresh_token"):
            v = doc.get(key)
            if isinstance(v, str) and v:
                out += [v, *v.splitlines()]
    if ";" in value and "=" in value:
        for part in value.split(";"):
            name, _, v = part.partition("=")
            if name.strip().lower() in ("accountkey", "sharedaccesssignature", "sig") and v:
                out.append(v.strip())
    return [f for f in out if f.strip() and not f.startswith("-----")]


# Re-exported for callers that build configs programmatically.
S3Item = S3DownloadItem
GCSItem = GCSDownloadItem
AzureItem = AzureBlobStorageDownloadItem
GitItem = GitDownloadItem
