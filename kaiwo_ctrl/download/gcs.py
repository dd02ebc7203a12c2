"""Google Cloud Storage through google-cloud-storage.

Credentials are the service-account key JSON read from the mounted secret file.
``STORAGE_EMULATOR_HOST`` (the library's own variable) points the client at an
emulator; the credentials are still used (tokens are fetched from the key's
``token_uri``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from api.kaiwo.download import GCSDownloadItem

from .config import read_secret
from .objectstore import Context, plan_buckets
from .transfer import AuthError, ConfigError, DownloadError, NotFoundError, Task, TransientError


class _CountingWriter:
    def __init__(self, fh, progress: Callable[[int], None]) -> None:
        self._fh = fh
        self._progress = progress

    def write(self, data) -> int:
        n = self._fh.write(data)
        self._progress(len(data))
        return n

    def __getattr__(self, name):
        return getattr(self._fh, name)


class GCSStore:
    kind = "gcs"

    def __init__(self, item: GCSDownloadItem, label: str, parallel: int) -> None:
        from google.cloud import storage
        from google.oauth2 import service_account

        raw = read_secret(item.application_credentials, f"{label}.applicationCredentials")
        try:
            info = json.loads(raw)
        except json.JSONDecodeError:
            raise ConfigError(f"{label}.applicationCredentials: secret is not a JSON service-account key") from None
        if not isinstance(info, dict):
            raise ConfigError(f"{label}.applicationCredentials: secret is not a JSON service-account key")
        try:
            creds = service_account.Credentials.from_service_account_info(
                info, scopes=["https://www.googleapis.com/auth/devstorage.read_only"]
            )
        except (ValueError, KeyError) as exc:
            # The message of these errors names missing fields, never values.
            raise ConfigError(f"{label}.applicationCredentials: invalid service-account key ({type(exc).__name__})") from None
        self.client = storage.Client(project=info.get("project_id") or None, credentials=creds)
        from requests.adapters import HTTPAdapter

        # One pooled connection per concurrent transfer.
        adapter = HTTPAdapter(pool_connections=max(10, parallel), pool_maxsize=max(10, parallel * 2), max_retries=0)
        self.client._http.mount("https://", adapter)
        self.client._http.mount("http://", adapter)

    def size_of(self, bucket: str, key: str) -> int:
        blob = self.client.bucket(bucket).get_blob(key)
        if blob is None:
            if not self._bucket_exists(bucket):
                raise NotFoundError(f"gcs bucket {bucket!r} does not exist")
            raise NotFoundError(f"object {key!r} not found in gcs bucket {bucket!r}")
        return int(blob.size or 0)

    def _bucket_exists(self, bucket: str) -> bool:
        try:
            return self.client.bucket(bucket).exists()
        except Exception:  # noqa: BLE001
            return True

    def list(self, bucket: str, prefix: str) -> Iterable[tuple[str, int]]:
        from google.api_core import exceptions as gx

        try:
            return [(b.name, int(b.size or 0)) for b in self.client.list_blobs(bucket, prefix=prefix or None)]
        except gx.NotFound:
            raise NotFoundError(f"gcs bucket {bucket!r} does not exist") from None

    def fetch(self, bucket: str, key: str, size: int, dest: Path, progress: Callable[[int], None]) -> None:
        blob = self.client.bucket(bucket).blob(key)
        with open(dest, "wb") as fh:
            blob.download_to_file(_CountingWriter(fh, progress), raw_download=True, checksum="md5")

    def close(self) -> None:
        self.client.close()

    def classify(self, exc: BaseException) -> DownloadError:
        from google.api_core import exceptions as gx
        from google.auth import exceptions as ax

        if isinstance(exc, ax.RefreshError):
            return AuthError(f"gcs credentials rejected while fetching a token: {_first_line(exc)}")
        if isinstance(exc, ax.TransportError):
            return TransientError(f"gcs token endpoint unreachable: {_first_line(exc)}")
        if isinstance(exc, gx.NotFound):
            return NotFoundError(f"gcs: {_first_line(exc)}")
        if isinstance(exc, (gx.Unauthorized, gx.Forbidden)):
            return AuthError(f"gcs credentials rejected: {_first_line(exc)}")
        if isinstance(exc, (gx.TooManyRequests, gx.ServerError, gx.RetryError)):
            return TransientError(f"gcs server error: {_first_line(exc)}")
        if isinstance(exc, gx.GoogleAPICallError):
            return DownloadError(f"gcs request failed: {_first_line(exc)}")
        try:
            from google.resumable_media.common import DataCorruption, InvalidResponse

            if isinstance(exc, DataCorruption):
                return TransientError("gcs download corrupted (checksum mismatch)")
            if isinstance(exc, InvalidResponse):
                status = getattr(exc.response, "status_code", 0)
                if status == 404:
                    return NotFoundError("gcs object not found")
                if status in (401, 403):
                    return AuthError(f"gcs credentials rejected (HTTP {status})")
                return TransientError(f"gcs unexpected response (HTTP {status})")
        except ImportError:  # pragma: no cover
            pass
        import requests

        if isinstance(exc, (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError, ConnectionError, TimeoutError)):
            return TransientError(f"gcs connection problem: {type(exc).__name__}")
        if isinstance(exc, OSError):
            return DownloadError(f"local I/O error: {exc}")
        return DownloadError(f"gcs error: {type(exc).__name__}: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def plan(items: list[GCSDownloadItem], ctx: Context, closers: list) -> list[Task]:
    tasks: list[Task] = []
    for i, item in enumerate(items):
        label = f"gcs[{i}]"
        store = GCSStore(item, label, ctx.parallel)
        closers.append(store.close)
        tasks.extend(plan_buckets(store, label, item.buckets, ctx))
    return tasks
