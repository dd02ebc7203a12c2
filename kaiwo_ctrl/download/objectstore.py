"""Planning shared by the bucket-based sources (S3, GCS, Azure Blob).

A source implements :class:`Store`; :func:`plan_buckets` turns the
``buckets``/``containers`` of one item into runner tasks:

* one task per ``files[]`` entry: stat the object, skip when the destination
  already has the same size, else fetch it atomically;
* one task per ``folders[]`` entry that lists the prefix and returns one file
  task per matching object.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from api.kaiwo.download import CloudDownloadBucket

from .placement import already_present, atomic_destination, safe_join
from .transfer import (
    DownloadError,
    EventLog,
    NotFoundError,
    ProgressMeter,
    RetryPolicy,
    Task,
    rate_fields,
    with_retries,
)


@dataclass
class Context:
    data_dir: Path
    hf_dir: Path
    log: EventLog
    policy: RetryPolicy
    parallel: int
    progress_interval: float = 2.0


class Store(Protocol):
    kind: str  # "s3", "gcs", "azureBlob"

    def size_of(self, bucket: str, key: str) -> int:
        """Object size in bytes; raise on a missing object or bucket."""

    def list(self, bucket: str, prefix: str) -> Iterable[tuple[str, int]]:
        """(key, size) for every object under ``prefix``; raise on a missing bucket."""

    def fetch(self, bucket: str, key: str, size: int, dest: Path, progress: Callable[[int], None]) -> None:
        """Write the object body to ``dest`` (a temporary path)."""

    def classify(self, exc: BaseException) -> DownloadError:
        """Map a client-library exception to a DownloadError."""


def folder_prefix(path: str) -> str:
    p = path.strip().lstrip("/")
    if p and not p.endswith("/"):
        p += "/"
    return p


def matches_glob(rel: str, glob: str | None) -> bool:
    if not glob:
        return True
    if "/" in glob:
        return fnmatch.fnmatchcase(rel, glob)
    return fnmatch.fnmatchcase(PurePosixPath(rel).name, glob)


def plan_buckets(store: Store, item: str, buckets: Iterable[CloudDownloadBucket], ctx: Context) -> list[Task]:
    tasks: list[Task] = []
    for bucket in buckets:
        for f in bucket.files or []:
            dest = safe_join(ctx.data_dir, f.target_path)
            name = f"{item} {bucket.name}/{f.path.lstrip('/')}"
            tasks.append(Task(item=name, run=_file_task(store, name, bucket.name, f.path.lstrip("/"), None, dest, ctx)))
        for folder in bucket.folders or []:
            dest_dir = safe_join(ctx.data_dir, folder.target_path)
            prefix = folder_prefix(folder.path)
            name = f"{item} {bucket.name}/{prefix}{folder.glob or '*'}"
            tasks.append(Task(item=name, run=_folder_task(store, name, bucket.name, prefix, folder.glob, dest_dir, ctx)))
    return tasks


def _folder_task(store: Store, name: str, bucket: str, prefix: str, glob: str | None, dest_dir: Path, ctx: Context):
    def run() -> list[Task]:
        def listing() -> list[tuple[str, int]]:
            return [(k, s) for k, s in store.list(bucket, prefix) if not k.endswith("/")]

        objects = with_retries(listing, item=name, policy=ctx.policy, log=ctx.log, classify=store.classify)
        if not objects:
            raise NotFoundError(f"no objects under prefix {prefix!r} in {store.kind} bucket {bucket!r}")
        selected = []
        for key, size in objects:
            rel = key[len(prefix):].lstrip("/")
            if rel and matches_glob(rel, glob):
                selected.append((key, size, safe_join(dest_dir, rel, what="object key")))
        total = sum(s for _, s, _ in selected)
        ctx.log.info("listed", item=name, objects=len(objects), selected=len(selected), bytes=total)
        if not selected:
            ctx.log.warning("nothing_matched", item=name, glob=glob)
        return [
            Task(item=name, label=key, run=_file_task(store, name, bucket, key, size, dest, ctx))
            for key, size, dest in selected
        ]

    return run


def _file_task(store: Store, item: str, bucket: str, key: str, size: int | None, dest: Path, ctx: Context):
    def run() -> None:
        meter = ProgressMeter(ctx.log, item, key, size, interval=ctx.progress_interval)

        def attempt() -> int:
            nonlocal size
            known = size if size is not None else store.size_of(bucket, key)
            size = known
            if already_present(dest, known):
                return -1
            meter.total = known
            meter.reset()
            ctx.log.info("file_start", item=item, file=key, bytes=known, dest=str(dest))
            with atomic_destination(dest, expected_size=known) as tmp:
                store.fetch(bucket, key, known, tmp, meter)
            return known

        got = with_retries(attempt, item=item, policy=ctx.policy, log=ctx.log, classify=store.classify)
        if got < 0:
            ctx.log.info("file_skipped", item=item, file=key, bytes=size, reason="present with same size", dest=str(dest))
        else:
            ctx.log.info("file_done", item=item, file=key, bytes=got, dest=str(dest), **rate_fields(got, meter.elapsed()))

    return run
