"""``kaiwo-ctrl download model <url> <dir>``: fetch a model into a directory.

The program of a Model's cache loader Job (and of the adapter loader). URL
schemes:

* ``hf://<org>/<repo>``: a Hugging Face snapshot (token from ``HF_TOKEN``);
* ``s3://<bucket>/<prefix>``: every object under the prefix (credentials and
  endpoint from the standard ``AWS_*`` variables, e.g. ``AWS_ENDPOINT_URL``
  for an S3-compatible server);
* ``oss://<bucket>/<prefix>``: Alibaba OSS through its S3-compatible API
  (``OSS_ACCESS_KEY_ID``/``OSS_ACCESS_KEY_SECRET``, endpoint ``OSS_ENDPOINT``);
* ``gs://<bucket>/<prefix>``: Google Cloud Storage
  (``GOOGLE_APPLICATION_CREDENTIALS``);
* ``az://<container>/<prefix>``: Azure Blob Storage (connection string from
  ``AZURE_STORAGE_CONNECTION_STRING``, the variable an AIMNamespaceConfig's
  ``azureBlob[]`` entry supplies).

Objects are written through a temporary file and renamed into place; a key
that would land outside the target directory (``..``, absolute paths) is
refused. Exit codes: 0 done, 2 bad arguments, 1 download failed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SECRET_ENV = ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "OSS_ACCESS_KEY_SECRET", "AZURE_STORAGE_CONNECTION_STRING")


class UnsafePath(ValueError):
    pass


def _log(event: str, **fields: Any) -> None:
    secrets = [os.environ[k] for k in SECRET_ENV if os.environ.get(k)]
    text = " ".join(f"{k}={v}" for k, v in fields.items())
    for s in secrets:
        text = text.replace(s, "***")
    print(f"download-model {event} {text}".rstrip(), file=sys.stderr, flush=True)


def safe_target(root: Path, rel: str) -> Path:
    """``root/rel``, refusing anything that escapes ``root``."""
    rel = rel.lstrip("/")
    if not rel or any(part in ("..", "") for part in rel.split("/")):
        raise UnsafePath(f"refusing object key {rel!r}")
    dest = (root / rel).resolve()
    if not dest.is_relative_to(root.resolve()):
        raise UnsafePath(f"refusing object key {rel!r}: outside the target directory")
    return dest


def _split(url: str) -> tuple[str, str, str]:
    scheme, sep, rest = url.partition("://")
    if not sep or not rest:
        raise ValueError(f"invalid model url {url!r}")
    rest = rest.split("?", 1)[0]
    bucket, _, prefix = rest.partition("/")
    return scheme, bucket, prefix


def _write_atomic(dest: Path, write) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _relative(key: str, prefix: str) -> str:
    base = prefix.rstrip("/") + "/" if prefix else ""
    return key[len(base):] if base and key.startswith(base) else (key.rsplit("/", 1)[-1] if key == prefix else key)


def _s3_objects(client: Any, bucket: str, prefix: str) -> Iterable[tuple[str, int]]:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents") or ():
            if not obj["Key"].endswith("/"):
                yield obj["Key"], obj["Size"]


def _s3(bucket: str, prefix: str, root: Path, oss: bool) -> int:
    import boto3

    kw: dict[str, Any] = {}
    if oss:
        kw = {
            "endpoint_url": os.environ.get("OSS_ENDPOINT") or None,
            "aws_access_key_id": os.environ.get("OSS_ACCESS_KEY_ID"),
            "aws_secret_access_key": os.environ.get("OSS_ACCESS_KEY_SECRET"),
        }
    client = boto3.client("s3", **{k: v for k, v in kw.items() if v})
    count = 0
    for key, size in _s3_objects(client, bucket, prefix):
        dest = safe_target(root, _relative(key, prefix))
        if dest.exists() and dest.stat().st_size == size:
            continue
        _write_atomic(dest, lambda fh, k=key: client.download_fileobj(bucket, k, fh))
        count += 1
        _log("fetched", key=key, bytes=size)
    return count


def _gcs(bucket: str, prefix: str, root: Path) -> int:
    from google.cloud import storage

    client = storage.Client()
    count = 0
    for blob in client.list_blobs(bucket, prefix=prefix):
        if blob.name.endswith("/"):
            continue
        dest = safe_target(root, _relative(blob.name, prefix))
        _write_atomic(dest, blob.download_to_file)
        count += 1
        _log("fetched", key=blob.name, bytes=blob.size)
    return count


def _azure(container: str, prefix: str, root: Path) -> int:
    from azure.storage.blob import BlobServiceClient

    conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING") or ""
    if not conn:
        raise ValueError("az:// needs AZURE_STORAGE_CONNECTION_STRING")
    with BlobServiceClient.from_connection_string(conn) as service:
        client = service.get_container_client(container)
        count = 0
        for blob in client.list_blobs(name_starts_with=prefix or None):
            if blob.name.endswith("/"):
                continue
            dest = safe_target(root, _relative(blob.name, prefix))
            if dest.exists() and dest.stat().st_size == blob.size:
                continue
            _write_atomic(dest, lambda fh, n=blob.name: client.download_blob(n).readinto(fh))
            count += 1
            _log("fetched", key=blob.name, bytes=blob.size)
    return count


def _hf(repo: str, root: Path) -> int:
    from huggingface_hub import snapshot_download

    snapshot_download(repo_id=repo, local_dir=str(root), token=os.environ.get("HF_TOKEN") or None)
    cache = root / ".cache"
    if cache.is_dir():  # the hub's download bookkeeping, not model files
        import shutil

        shutil.rmtree(cache, ignore_errors=True)
    return sum(1 for p in root.rglob("*") if p.is_file())


def download_model(url: str, target: str | Path) -> int:
    """Fetch ``url`` into ``target``; returns the number of files written."""
    scheme, bucket, prefix = _split(url)
    root = Path(target)
    root.mkdir(parents=True, exist_ok=True)
    if scheme in ("s3", "oss"):
        return _s3(bucket, prefix, root, oss=scheme == "oss")
    if scheme == "gs":
        return _gcs(bucket, prefix, root)
    if scheme == "az":
        return _azure(bucket, prefix, root)
    if scheme == "hf":
        return _hf(f"{bucket}/{prefix}".rstrip("/"), root)
    raise ValueError(f"unsupported scheme {scheme!r} (hf, s3, gs, oss, az)")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        _log("bad_arguments", usage="kaiwo-ctrl download model <url> <dir>")
        return 2
    url, target = argv
    try:
        _split(url)
    except ValueError as e:
        _log("bad_arguments", error=str(e))
        return 2
    _log("start", url=url, target=target)
    try:
        n = download_model(url, target)
    except (UnsafePath, ValueError) as e:
        _log("failed", error=str(e))
        return 2 if isinstance(e, ValueError) and not isinstance(e, UnsafePath) else 1
    except Exception as e:  # noqa: BLE001 - report any client error as a failed download
        _log("failed", error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return 1
    _log("done", files=n)
    return 0
