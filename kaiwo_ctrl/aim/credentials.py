"""The credentials a model or data source needs, as Secret references.

Given the effective AIMNamespaceConfig of a namespace and one *source* (a URL
scheme, its endpoint, and the env var names the object already sets itself),
:func:`for_source` returns the env vars, volumes and mounts to add to the
container that downloads from it. Every value is a reference the kubelet
resolves (``secretKeyRef`` env, secret volumes): the operator never reads a
Secret.

Precedence, per credential: what the object sets itself (its own env var, or
a download item's own secret reference) wins; then the namespace's
AIMNamespaceConfig; then the system config's ``secretNames`` (KubeAI's chart
defaults, referenced ``optional`` so a missing Secret does not block a Pod).
Namespace-config references are not optional: a typo in a Secret name shows up
as a Pod that names the missing Secret instead of an unauthenticated download.

* ``hf``: ``HF_TOKEN``.
* ``s3``: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_ENDPOINT_URL``
  when the source has no endpoint of its own) from the ``s3[]`` entry whose
  ``endpointUrl`` matches the source's endpoint by scheme, host and port; with
  no endpoint on the source, the only entry (or the only one without an
  endpoint).
* ``gs``/``gcs``: the first ``gcs[]`` key mounted as a file, with
  ``GOOGLE_APPLICATION_CREDENTIALS`` pointing at it.
* ``azure``: ``AZURE_STORAGE_CONNECTION_STRING`` from the first ``azureBlob[]``.
* ``oss`` (Alibaba, KubeAI's ``secretNames.alibaba``): system layer only, as the
  namespace config has no OSS entries.

Kaiwo download Jobs can fetch from several endpoints at once, which one set of
env vars cannot express; :func:`fill_download_items` instead fills each item's
missing secret reference, and the download Job mounts it as a file as it does
for the item's own references.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

HF_TOKEN = "HF_TOKEN"
AWS_KEY_ID, AWS_SECRET, AWS_ENDPOINT = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"
GOOGLE_CREDENTIALS = "GOOGLE_APPLICATION_CREDENTIALS"
AZURE_CONNECTION = "AZURE_STORAGE_CONNECTION_STRING"
OSS_KEY_ID, OSS_SECRET = "OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET"

#: Where the namespace config's GCS key is mounted (file name fixed).
GCS_VOLUME, GCS_DIR, GCS_FILE = "aim-gcs-credentials", "/secrets/aim-gcs-credentials", "credentials.json"
#: KubeAI's system-config layout (secretNames.*): keys and the GCP volume.
SYSTEM_KEYS = {
    "hf": "token", "aws_id": "accessKeyID", "aws_secret": "secretAccessKey", "gcp": "jsonKeyfile",
    "oss_id": "accessKeyID", "oss_secret": "accessKeySecret",
}
SYSTEM_GCS_VOLUME, SYSTEM_GCS_DIR = "gcp-credentials", "/secrets/gcp-credentials"

_PROVIDERS = {
    "hf": "hf", "huggingface": "hf",
    "s3": "s3",
    "oss": "oss",
    "gs": "gcs", "gcs": "gcs",
    "az": "azure", "azure": "azure", "azureblob": "azure", "abfs": "azure", "wasbs": "azure",
}
_DEFAULT_PORTS = {"https": 443, "http": 80}


@dataclass(frozen=True)
class Additions:
    """What to add to one container (env, mounts) and its pod (volumes)."""

    env: tuple[dict[str, Any], ...] = ()
    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    #: Which layer supplied the credentials: "object", "namespace", "system" or "" (none).
    layer: str = ""

    def __bool__(self) -> bool:
        return bool(self.env or self.volumes or self.mounts)

    def apply(self, container: dict[str, Any], pod_spec: dict[str, Any]) -> None:
        """Append to ``container`` and ``pod_spec`` in place, skipping names they already have."""
        _append_named(container.setdefault("env", []), self.env)
        _append_named(container.setdefault("volumeMounts", []), self.mounts)
        _append_named(pod_spec.setdefault("volumes", []), self.volumes)
        for holder, key in ((container, "env"), (container, "volumeMounts"), (pod_spec, "volumes")):
            if not holder[key]:
                del holder[key]


def _append_named(items: list[dict], new: Iterable[dict]) -> None:
    have = {i.get("name") for i in items}
    for n in new:
        if n.get("name") not in have:
            items.append(dict(n))
            have.add(n.get("name"))


# --------------------------------------------------------------------------- inputs


def config_spec(config: Any) -> dict[str, Any]:
    """The config's ``spec`` as a camelCase dict, from a typed model, a whole
    object or a spec dict (``None`` -> ``{}``)."""
    if config is None:
        return {}
    if hasattr(config, "to_k8s"):
        config = config.to_k8s()
    if not isinstance(config, Mapping):
        raise TypeError(f"expected an AIMNamespaceConfig (model or dict), got {type(config).__name__}")
    if "kind" in config or "metadata" in config:
        return dict(config.get("spec") or {})
    return dict(config)


def _credentials(config: Any) -> Mapping[str, Any]:
    return config_spec(config).get("credentials") or {}


def _ref(value: Any) -> tuple[str, str] | None:
    """(secretName, secretKey) of a SecretValueReference, or None when incomplete."""
    if not isinstance(value, Mapping):
        return None
    name, key = value.get("secretName"), value.get("secretKey")
    return (name, key) if name and key else None


def provider_of(scheme_or_url: str) -> str:
    """``hf``, ``s3``, ``oss``, ``gcs``, ``azure`` or ``""`` for a URL or bare scheme."""
    scheme = scheme_or_url.split("://", 1)[0] if "://" in scheme_or_url else scheme_or_url
    return _PROVIDERS.get(scheme.strip().lower(), "")


def endpoint_key(url: str | None) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an endpoint URL, default ports filled in; None if empty."""
    text = (url or "").strip()
    if not text:
        return None
    if "://" not in text:
        text = "https://" + text
    try:
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        return None
    return (scheme, (parts.hostname or "").lower(), port)


def match_s3(entries: Sequence[Mapping[str, Any]], endpoint: str | None) -> Mapping[str, Any] | None:
    """The ``s3[]`` entry for a source endpoint (see the module docstring)."""
    entries = [e for e in entries or () if isinstance(e, Mapping)]
    want = endpoint_key(endpoint)
    if want is not None:
        return next((e for e in entries if endpoint_key(e.get("endpointUrl")) == want), None)
    if len(entries) == 1:
        return entries[0]
    bare = [e for e in entries if not (e.get("endpointUrl") or "").strip()]
    return bare[0] if len(bare) == 1 else None


# --------------------------------------------------------------------------- env builders


def secret_env(name: str, ref: tuple[str, str], optional: bool = False) -> dict[str, Any]:
    sel: dict[str, Any] = {"name": ref[0], "key": ref[1]}
    if optional:
        sel["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": sel}}


def _gcs_file(secret: str, key: str, volume: str, directory: str, optional: bool) -> Additions:
    source: dict[str, Any] = {"secretName": secret, "items": [{"key": key, "path": GCS_FILE}]}
    if optional:
        source["optional"] = True
    return Additions(
        env=({"name": GOOGLE_CREDENTIALS, "value": f"{directory}/{GCS_FILE}"},),
        volumes=({"name": volume, "secret": source},),
        mounts=({"name": volume, "mountPath": directory, "readOnly": True},),
    )


def _namespace_additions(provider: str, creds: Mapping[str, Any], endpoint: str | None) -> Additions:
    if provider == "hf":
        ref = _ref(creds.get("huggingFaceToken"))
        return Additions(env=(secret_env(HF_TOKEN, ref),)) if ref else Additions()
    if provider == "s3":
        entry = match_s3(creds.get("s3") or (), endpoint)
        if entry is None:
            return Additions()
        key_id, secret = _ref(entry.get("accessKeyId")), _ref(entry.get("secretAccessKey"))
        if not (key_id and secret):
            return Additions()
        env = [secret_env(AWS_KEY_ID, key_id), secret_env(AWS_SECRET, secret)]
        if not (endpoint or "").strip() and (entry.get("endpointUrl") or "").strip():
            env.append({"name": AWS_ENDPOINT, "value": entry["endpointUrl"].strip()})
        return Additions(env=tuple(env))
    if provider == "gcs":
        ref = next((r for e in creds.get("gcs") or () if (r := _ref((e or {}).get("applicationCredentials")))), None)
        return _gcs_file(ref[0], ref[1], GCS_VOLUME, GCS_DIR, optional=False) if ref else Additions()
    if provider == "azure":
        ref = next((r for e in creds.get("azureBlob") or () if (r := _ref((e or {}).get("connectionString")))), None)
        return Additions(env=(secret_env(AZURE_CONNECTION, ref),)) if ref else Additions()
    return Additions()


def _system_additions(provider: str, names: Mapping[str, Any]) -> Additions:
    if provider == "hf" and names.get("huggingface"):
        return Additions(env=(secret_env(HF_TOKEN, (names["huggingface"], SYSTEM_KEYS["hf"]), optional=True),))
    if provider == "s3" and names.get("aws"):
        return Additions(env=(
            secret_env(AWS_KEY_ID, (names["aws"], SYSTEM_KEYS["aws_id"]), optional=True),
            secret_env(AWS_SECRET, (names["aws"], SYSTEM_KEYS["aws_secret"]), optional=True),
        ))
    if provider == "oss" and names.get("alibaba"):
        return Additions(env=(
            secret_env(OSS_KEY_ID, (names["alibaba"], SYSTEM_KEYS["oss_id"]), optional=True),
            secret_env(OSS_SECRET, (names["alibaba"], SYSTEM_KEYS["oss_secret"]), optional=True),
        ))
    if provider == "gcs" and names.get("gcp"):
        return _gcs_file(names["gcp"], SYSTEM_KEYS["gcp"], SYSTEM_GCS_VOLUME, SYSTEM_GCS_DIR, optional=True)
    return Additions()


#: The env var(s) by which an object supplies each provider's credential itself.
OWN_VARS = {
    "hf": (HF_TOKEN, "HUGGING_FACE_HUB_TOKEN"),
    "s3": (AWS_KEY_ID, AWS_SECRET),
    "gcs": (GOOGLE_CREDENTIALS,),
    "azure": (AZURE_CONNECTION,),
    "oss": (OSS_KEY_ID, OSS_SECRET),
}


def for_source(
    config: Any,
    source: str,
    *,
    endpoint: str | None = None,
    own_env: Iterable[str] = (),
    system_secret_names: Mapping[str, Any] | None = None,
) -> Additions:
    """Credentials for one source (a URL such as ``s3://bucket/path`` or a bare
    scheme), by precedence: object > namespace config > system ``secretNames``.

    ``endpoint``: the source's endpoint (a Model's ``AWS_ENDPOINT_URL`` env, a
    download item's ``endpointUrl``). ``own_env``: names of env vars the object
    sets itself; a provider whose credential var is among them gets nothing added.
    """
    provider = provider_of(source)
    if not provider:
        return Additions()
    if set(own_env) & set(OWN_VARS[provider]):
        return Additions(layer="object")
    found = _namespace_additions(provider, _credentials(config), endpoint)
    if found:
        return Additions(found.env, found.volumes, found.mounts, layer="namespace")
    found = _system_additions(provider, system_secret_names or {})
    if found:
        return Additions(found.env, found.volumes, found.mounts, layer="system")
    return Additions()


def env_names(env: Any) -> list[str]:
    """Names of a container env given as a list of EnvVars or a name->value map (KubeAI)."""
    if isinstance(env, Mapping):
        return [str(k) for k in env]
    return [str(e["name"]) for e in env or () if isinstance(e, Mapping) and e.get("name")]


def for_model(config: Any, model: Mapping[str, Any], *, url: str | None = None,
              system_secret_names: Mapping[str, Any] | None = None) -> Additions:
    """Credentials for a KubeAI Model's server container, cache loader Job or
    adapter sidecar (pass the adapter's ``url``). The Model's own ``spec.env``
    (a name->value map) is the object layer, and its ``AWS_ENDPOINT_URL`` is the
    S3 endpoint matched against the config's ``s3[]`` entries."""
    spec = model.get("spec") or {}
    env = spec.get("env") or {}
    endpoint = env.get(AWS_ENDPOINT) if isinstance(env, Mapping) else next(
        (e.get("value") for e in env if isinstance(e, Mapping) and e.get("name") == AWS_ENDPOINT), None)
    return for_source(config, url or spec.get("url") or "", endpoint=endpoint, own_env=env_names(env),
                      system_secret_names=system_secret_names)


# --------------------------------------------------------------------------- download items


def _has_ref(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value.get("secretName"))


def _as_ref(ref: tuple[str, str]) -> dict[str, str]:
    return {"secretName": ref[0], "secretKey": ref[1]}


def _fill_s3(item: Mapping[str, Any], creds: Mapping[str, Any]) -> Mapping[str, Any]:
    if _has_ref(item.get("accessKeyId")) or _has_ref(item.get("secretKey")):
        return item
    entry = match_s3(creds.get("s3") or (), item.get("endpointUrl"))
    key_id, secret = (_ref(entry.get("accessKeyId")), _ref(entry.get("secretAccessKey"))) if entry else (None, None)
    if not (key_id and secret):
        return item
    return {**item, "accessKeyId": _as_ref(key_id), "secretKey": _as_ref(secret)}


def _fill_single(item: Mapping[str, Any], field: str, entries: Any, entry_field: str) -> Mapping[str, Any]:
    if _has_ref(item.get(field)):
        return item
    ref = next((r for e in entries or () if (r := _ref((e or {}).get(entry_field)))), None)
    return {**item, field: _as_ref(ref)} if ref else item


def fill_download_items(config: Any, downloads: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``data.download`` with every S3/GCS/Azure item that names no Secret of its own
    given the namespace config's reference (S3 matched by the item's ``endpointUrl``).
    Items with their own references are returned unchanged (the object wins)."""
    if not downloads:
        return dict(downloads) if downloads is not None else None
    creds = _credentials(config)
    if not creds:
        return dict(downloads)
    out = dict(downloads)
    if out.get("s3"):
        out["s3"] = [_fill_s3(i, creds) for i in out["s3"]]
    if out.get("gcs"):
        out["gcs"] = [_fill_single(i, "applicationCredentials", creds.get("gcs"), "applicationCredentials") for i in out["gcs"]]
    if out.get("azureBlob"):
        out["azureBlob"] = [
            _fill_single(i, "connectionString", creds.get("azureBlob"), "connectionString") for i in out["azureBlob"]
        ]
    return out


def download_env(config: Any, *, hf: bool, own_env: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Env for a Kaiwo download Job: ``HF_TOKEN`` when it fetches HF repos and
    the workload sets no token itself."""
    return list(for_source(config, "hf", own_env=own_env).env) if hf else []


# --------------------------------------------------------------------------- image pull secrets


def pull_secrets(config: Any, existing: Iterable[Any] | None = None) -> list[dict[str, str]]:
    """``existing`` imagePullSecrets (dicts or names) followed by the config's
    ``images.imagePullSecrets``, de-duplicated, order kept."""
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    names = [(e.get("name") if isinstance(e, Mapping) else e) for e in existing or ()]
    names += list((config_spec(config).get("images") or {}).get("imagePullSecrets") or ())
    for name in names:
        if name and name not in seen:
            seen.add(name)
            out.append({"name": name})
    return out


__all__ = [
    "Additions",
    "config_spec",
    "download_env",
    "endpoint_key",
    "env_names",
    "fill_download_items",
    "for_model",
    "for_source",
    "match_s3",
    "provider_of",
    "pull_secrets",
]
