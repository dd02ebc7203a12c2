"""Hugging Face Hub repositories through huggingface_hub, into the HF_HOME cache layout.

Files land in ``<hf-dir>/hub/models--<org>--<name>/{blobs,snapshots,refs}``,
exactly where a workload with ``HF_HOME=<hf-dir>`` looks for them. The library
writes each blob to an ``.incomplete`` name and links it into the snapshot only
when complete, and re-uses blobs already cached. ``HF_ENDPOINT`` selects the Hub
(or a mirror). The token is the item's ``token`` file when given, else whatever
huggingface_hub finds itself (``HF_TOKEN``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .config import HuggingFaceTask, read_secret
from .objectstore import Context
from .transfer import (
    AuthError,
    ConfigError,
    DownloadError,
    NotFoundError,
    ProgressMeter,
    Task,
    TransientError,
    rate_fields,
    with_retries,
)


def _tqdm_for(meter: ProgressMeter):
    """A tqdm class that draws nothing and forwards byte updates to ``meter``."""
    import tqdm

    class _LogTqdm(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)
            kwargs["file"] = open(os.devnull, "w")  # noqa: SIM115 - closed in close()
            kwargs["disable"] = False
            kwargs["mininterval"] = 3600
            super().__init__(*args, **kwargs)
            desc = str(kwargs.get("desc") or "")
            # Count written bytes once: skip the file-count bar and the network-transfer bar.
            self._counts = kwargs.get("unit") == "B" and not desc.startswith("Downloading bytes")

        def update(self, n=1):
            if self._counts and n:
                meter(int(n))
            return super().update(n)

        def close(self):
            fp = self.fp
            try:
                super().close()
            finally:
                try:
                    fp.close()
                except Exception:  # noqa: BLE001
                    pass

    return _LogTqdm


class HFJob:
    def __init__(self, item: HuggingFaceTask, label: str, ctx: Context) -> None:
        self.item = item
        self.label = label
        self.ctx = ctx
        self.repo_id = item.repo_id.strip()
        if not self.repo_id:
            raise ConfigError(f"{label}: repoId is empty")
        self.token = read_secret(item.token, f"{label}.token") if item.token is not None else None
        self.cache_dir = ctx.hf_dir / "hub"
        self.name = f"{label} {self.repo_id}"

    def tasks(self) -> list[Task]:
        files = [f.strip().lstrip("/") for f in (self.item.files or []) if f.strip()]
        if not files:
            return [Task(item=self.name, run=self._snapshot)]
        return [Task(item=f"{self.name}/{f}", label=f, run=self._file_runner(f)) for f in files]

    def _snapshot(self) -> None:
        from huggingface_hub import snapshot_download

        meter = ProgressMeter(self.ctx.log, self.name, "*", None, interval=self.ctx.progress_interval)

        def attempt() -> str:
            meter.reset()
            self.ctx.log.info("item_start", item=self.name, repo=self.repo_id, dest=str(self.cache_dir))
            return snapshot_download(
                self.repo_id,
                cache_dir=str(self.cache_dir),
                token=self.token,
                max_workers=self.ctx.parallel,
                tqdm_class=_tqdm_for(meter),
            )

        path = with_retries(attempt, item=self.name, policy=self.ctx.policy, log=self.ctx.log, classify=self.classify)
        self.ctx.log.info(
            "item_done", item=self.name, bytes=meter.done, dest=path, files=_count_files(Path(path)), **rate_fields(meter.done, meter.elapsed())
        )

    def _file_runner(self, filename: str):
        def run() -> None:
            from huggingface_hub import hf_hub_download

            item = f"{self.name}/{filename}"
            meter = ProgressMeter(self.ctx.log, item, filename, None, interval=self.ctx.progress_interval)

            def attempt() -> str:
                meter.reset()
                self.ctx.log.info("file_start", item=item, file=filename, repo=self.repo_id)
                return hf_hub_download(
                    self.repo_id,
                    filename,
                    cache_dir=str(self.cache_dir),
                    token=self.token,
                    tqdm_class=_tqdm_for(meter),
                )

            path = with_retries(attempt, item=item, policy=self.ctx.policy, log=self.ctx.log, classify=self.classify)
            size = os.path.getsize(path)
            if meter.done == 0:
                self.ctx.log.info("file_skipped", item=item, file=filename, bytes=size, reason="already cached", dest=path)
            else:
                self.ctx.log.info("file_done", item=item, file=filename, bytes=size, dest=path, **rate_fields(meter.done, meter.elapsed()))

        return run

    def classify(self, exc: BaseException) -> DownloadError:
        from huggingface_hub import errors as he

        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(exc, he.GatedRepoError):
            return AuthError(f"hugging face repo {self.repo_id!r} is gated and the token has no access")
        if isinstance(exc, he.RepositoryNotFoundError):
            if status == 401 and (self.token or os.environ.get("HF_TOKEN")):
                return AuthError(f"hugging face token rejected for repo {self.repo_id!r} (HTTP 401)")
            return NotFoundError(f"hugging face repo {self.repo_id!r} not found (or not visible without a valid token)")
        if isinstance(exc, he.RevisionNotFoundError):
            return NotFoundError(f"revision not found in hugging face repo {self.repo_id!r}")
        entry_nf = getattr(he, "RemoteEntryNotFoundError", None) or getattr(he, "EntryNotFoundError")
        if isinstance(exc, entry_nf):
            return NotFoundError(f"file not found in hugging face repo {self.repo_id!r}")
        if isinstance(exc, he.LocalEntryNotFoundError):
            return TransientError(f"hugging face hub unreachable and nothing cached for {self.repo_id!r}")
        if isinstance(exc, he.HfHubHTTPError):
            if status in (401, 403):
                return AuthError(f"hugging face credentials rejected (HTTP {status})")
            if status == 404:
                return NotFoundError(f"hugging face: not found (HTTP 404) in {self.repo_id!r}")
            if status is None or status >= 500 or status == 429:
                return TransientError(f"hugging face hub error (HTTP {status})")
            return DownloadError(f"hugging face request failed (HTTP {status})")
        mod = type(exc).__module__ or ""
        if mod.startswith(("httpx", "httpcore", "requests", "urllib3")) or isinstance(exc, (ConnectionError, TimeoutError)):
            return TransientError(f"hugging face connection problem: {type(exc).__name__}")
        if isinstance(exc, OSError):
            return DownloadError(f"local I/O error: {exc}")
        if isinstance(exc, ValueError):
            return ConfigError(f"hugging face: {exc}")
        return DownloadError(f"hugging face error: {type(exc).__name__}: {exc}")


def _count_files(p: Path) -> int:
    return sum(len(files) for _r, _d, files in os.walk(p))


def plan(items: list[HuggingFaceTask], ctx: Context, closers: list) -> list[Task]:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # Anything huggingface_hub derives from HF_HOME (xet cache, lock files) stays on the HF volume.
    os.environ["HF_HOME"] = str(ctx.hf_dir)
    tasks: list[Task] = []
    for i, item in enumerate(items):
        tasks.extend(HFJob(item, f"hf[{i}]", ctx).tasks())
    return tasks
