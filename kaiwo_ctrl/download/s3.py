"""S3-compatible object stores through boto3 / s3transfer."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from api.kaiwo.download import S3DownloadItem

from .config import read_secret
from .objectstore import Context, plan_buckets
from .transfer import AuthError, ConfigError, DownloadError, NotFoundError, Task, TransientError

MiB = 1024 * 1024

_NOT_FOUND = {"NoSuchBucket", "NoSuchKey", "404", "NotFound", "NoSuchVersion"}
_AUTH = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "InvalidClientTokenId",
    "AuthorizationHeaderMalformed",
    "AllAccessDisabled",
    "401",
    "403",
}
_TRANSIENT = {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling", "RequestTimeTooSkewed"}


class S3Store:
    kind = "s3"

    def __init__(self, item: S3DownloadItem, label: str, parallel: int) -> None:
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config
        from s3transfer.manager import TransferConfig, TransferManager

        access_key = read_secret(item.access_key_id, f"{label}.accessKeyId") if item.access_key_id else None
        secret_key = read_secret(item.secret_key, f"{label}.secretKey") if item.secret_key else None
        if bool(access_key) != bool(secret_key):
            raise ConfigError(f"{label}: accessKeyId and secretKey must be given together")
        endpoint = (item.endpoint_url or "").strip() or None
        cfg: dict = {
            "retries": {"max_attempts": 3, "mode": "standard"},
            "max_pool_connections": max(10, parallel * 2),
            "connect_timeout": 10,
            "read_timeout": 60,
        }
        if endpoint and "amazonaws.com" not in endpoint:
            cfg["s3"] = {"addressing_style": "path"}
        has_env_creds = bool(os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE"))
        if not access_key and not has_env_creds:
            cfg["signature_version"] = UNSIGNED
        session = boto3.session.Session()
        self.client = session.client(
            "s3",
            endpoint_url=endpoint,
            region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=Config(**cfg),
        )
        self.manager = TransferManager(
            self.client,
            TransferConfig(
                multipart_threshold=64 * MiB,
                multipart_chunksize=16 * MiB,
                max_request_concurrency=max(4, parallel * 2),
                num_download_attempts=3,
            ),
        )

    def size_of(self, bucket: str, key: str) -> int:
        try:
            return int(self.client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except Exception as exc:
            err = self.classify(exc)
            if isinstance(err, NotFoundError):
                # HEAD has no body, so tell a missing bucket from a missing key.
                if not self._bucket_exists(bucket):
                    raise NotFoundError(f"s3 bucket {bucket!r} does not exist") from None
                raise NotFoundError(f"object {key!r} not found in s3 bucket {bucket!r}") from None
            raise

    def _bucket_exists(self, bucket: str) -> bool:
        try:
            self.client.head_bucket(Bucket=bucket)
            return True
        except Exception as exc:  # noqa: BLE001
            return not isinstance(self.classify(exc), NotFoundError)

    def list(self, bucket: str, prefix: str) -> Iterable[tuple[str, int]]:
        paginator = self.client.get_paginator("list_objects_v2")
        out = []
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []) or []:
                out.append((obj["Key"], int(obj["Size"])))
        return out

    def fetch(self, bucket: str, key: str, size: int, dest: Path, progress: Callable[[int], None]) -> None:
        from s3transfer.subscribers import BaseSubscriber

        class _Sub(BaseSubscriber):
            def on_queued(self, future, **kwargs):
                future.meta.provide_transfer_size(size)

            def on_progress(self, future, bytes_transferred, **kwargs):
                progress(bytes_transferred)

        self.manager.download(bucket, key, str(dest), subscribers=[_Sub()]).result()

    def close(self) -> None:
        self.manager.shutdown()

    def classify(self, exc: BaseException) -> DownloadError:
        from botocore import exceptions as bx

        if isinstance(exc, bx.ClientError):
            err = exc.response.get("Error", {}) or {}
            code = str(err.get("Code", ""))
            status = int((exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
            bucket = err.get("BucketName")
            msg = f"{code or status}: {err.get('Message') or 'request failed'}"
            if code in _NOT_FOUND or status == 404:
                if code == "NoSuchBucket" or bucket:
                    return NotFoundError(f"s3 bucket {bucket or ''!r} does not exist ({msg})")
                return NotFoundError(f"s3 object not found ({msg})")
            if code in _AUTH or status in (401, 403):
                return AuthError(f"s3 credentials rejected ({msg})")
            if code in _TRANSIENT or status >= 500 or status == 429:
                return TransientError(f"s3 server error ({msg})")
            return DownloadError(f"s3 request failed ({msg})")
        if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
            return AuthError("s3 credentials missing or incomplete")
        if isinstance(exc, bx.ParamValidationError):
            return ConfigError(f"invalid s3 parameter: {exc}")
        if isinstance(
            exc,
            (
                bx.EndpointConnectionError,
                bx.ConnectionClosedError,
                bx.ReadTimeoutError,
                bx.ConnectTimeoutError,
                bx.IncompleteReadError,
                bx.ResponseStreamingError,
                bx.HTTPClientError,
                ConnectionError,
                TimeoutError,
            ),
        ):
            return TransientError(f"s3 connection problem: {type(exc).__name__}: {exc}")
        try:
            from s3transfer.exceptions import RetriesExceededError

            if isinstance(exc, RetriesExceededError):
                return TransientError(f"s3 transfer interrupted: {exc.last_exception or exc}")
        except ImportError:  # pragma: no cover
            pass
        if isinstance(exc, OSError):
            return DownloadError(f"local I/O error: {exc}")
        return DownloadError(f"s3 error: {type(exc).__name__}: {exc}")


def plan(items: list[S3DownloadItem], ctx: Context, closers: list) -> list[Task]:
    tasks: list[Task] = []
    for i, item in enumerate(items):
        label = f"s3[{i}]"
        store = S3Store(item, label, ctx.parallel)
        closers.append(store.close)
        tasks.extend(plan_buckets(store, label, item.buckets, ctx))
    return tasks
