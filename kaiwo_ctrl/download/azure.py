"""Azure Blob Storage through azure-storage-blob (connection string from the secret file)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from api.kaiwo.download import AzureBlobStorageDownloadItem

from .config import read_secret
from .objectstore import Context, plan_buckets
from .transfer import AuthError, ConfigError, DownloadError, NotFoundError, Task, TransientError


class AzureStore:
    kind = "azureBlob"

    def __init__(self, item: AzureBlobStorageDownloadItem, label: str, parallel: int) -> None:
        from azure.storage.blob import BlobServiceClient

        conn = read_secret(item.connection_string, f"{label}.connectionString")
        try:
            # The SDK's own retries are kept short; the downloader's backoff does the rest.
            self.client = BlobServiceClient.from_connection_string(
                conn, retry_total=2, retry_backoff_factor=0.5, connection_timeout=10, read_timeout=60
            )
        except ValueError:
            raise ConfigError(f"{label}.connectionString: not a valid Azure Storage connection string") from None

    def size_of(self, bucket: str, key: str) -> int:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return int(self.client.get_blob_client(bucket, key).get_blob_properties().size)
        except ResourceNotFoundError as exc:
            code = getattr(exc, "error_code", None) or ""
            if code == "ContainerNotFound" or not self._container_exists(bucket):
                raise NotFoundError(f"azure container {bucket!r} does not exist") from None
            raise NotFoundError(f"blob {key!r} not found in azure container {bucket!r}") from None

    def _container_exists(self, bucket: str) -> bool:
        try:
            return bool(self.client.get_container_client(bucket).exists())
        except Exception:  # noqa: BLE001
            return True

    def list(self, bucket: str, prefix: str) -> Iterable[tuple[str, int]]:
        container = self.client.get_container_client(bucket)
        return [(b.name, int(b.size or 0)) for b in container.list_blobs(name_starts_with=prefix or None)]

    def fetch(self, bucket: str, key: str, size: int, dest: Path, progress: Callable[[int], None]) -> None:
        last = 0

        def hook(current: int, total: int | None) -> None:
            nonlocal last
            if current > last:
                progress(current - last)
                last = current

        blob = self.client.get_blob_client(bucket, key)
        with open(dest, "wb") as fh:
            blob.download_blob(max_concurrency=4, progress_hook=hook).readinto(fh)

    def close(self) -> None:
        self.client.close()

    def classify(self, exc: BaseException) -> DownloadError:
        from azure.core import exceptions as ax

        code = getattr(exc, "error_code", None)
        status = getattr(exc, "status_code", None) or 0
        if isinstance(exc, ax.ResourceNotFoundError) or status == 404:
            if code == "ContainerNotFound":
                return NotFoundError(f"azure container does not exist ({code})")
            return NotFoundError(f"azure resource not found ({code or status})")
        if isinstance(exc, ax.ClientAuthenticationError) or status in (401, 403):
            return AuthError(f"azure credentials rejected ({code or status})")
        if isinstance(exc, (ax.ServiceRequestError, ax.ServiceResponseError, ax.IncompleteReadError)):
            return TransientError(f"azure connection problem: {type(exc).__name__}")
        if isinstance(exc, ax.HttpResponseError):
            if status >= 500 or status in (408, 429):
                return TransientError(f"azure server error ({code or status})")
            return DownloadError(f"azure request failed ({code or status})")
        if isinstance(exc, ax.AzureError):
            return TransientError(f"azure error: {type(exc).__name__}")
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return TransientError(f"azure connection problem: {type(exc).__name__}")
        if isinstance(exc, OSError):
            return DownloadError(f"local I/O error: {exc}")
        return DownloadError(f"azure error: {type(exc).__name__}")


def plan(items: list[AzureBlobStorageDownloadItem], ctx: Context, closers: list) -> list[Task]:
    tasks: list[Task] = []
    for i, item in enumerate(items):
        label = f"azureBlob[{i}]"
        store = AzureStore(item, label, ctx.parallel)
        closers.append(store.close)
        tasks.extend(plan_buckets(store, label, item.containers, ctx))
    return tasks
