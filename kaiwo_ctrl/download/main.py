"""Command line of the download program (``kaiwo-ctrl download``)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path
from typing import NoReturn

from .config import (
    DEFAULT_DATA_DIR,
    DEFAULT_HF_DIR,
    SECRETS_DIR_ENV,
    DownloadConfig,
    read_secret,
    secret_fragments,
    secrets_dir,
    url_credentials,
)
from .objectstore import Context
from .transfer import ConfigError, DownloadError, EventLog, ExitCode, RetryPolicy, Runner, RunResult, Task


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Reports usage errors as an exception so they become exit code 2 with a JSON log line."""

    def error(self, message: str) -> NoReturn:
        raise _ArgError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="kaiwo-ctrl download",
        description="Fetch the data and Hugging Face repositories listed in a download config "
        "(the program the workload's download Job runs).",
    )
    p.add_argument("--config", dest="config", help="download config file (YAML or JSON)")
    p.add_argument("config_pos", nargs="?", metavar="CONFIG", help="download config file (alternative to --config)")
    p.add_argument("--data-dir", help=f"data volume root (default: config downloadRoot, else {DEFAULT_DATA_DIR})")
    p.add_argument("--hf-dir", help=f"Hugging Face home (default: config hfHome, else $HF_HOME, else {DEFAULT_HF_DIR})")
    p.add_argument(
        "--parallel",
        type=int,
        default=int(os.environ.get("KAIWO_DOWNLOAD_PARALLEL", "8")),
        help="maximum concurrent transfers (default 8, env KAIWO_DOWNLOAD_PARALLEL)",
    )
    p.add_argument(
        "--retries",
        type=int,
        default=int(os.environ.get("KAIWO_DOWNLOAD_RETRIES", "5")),
        help="attempts per file on transient errors (default 5, env KAIWO_DOWNLOAD_RETRIES)",
    )
    p.add_argument(
        "--retry-delay",
        type=float,
        default=float(os.environ.get("KAIWO_DOWNLOAD_RETRY_DELAY", "1.0")),
        help="base backoff in seconds, doubled per attempt (default 1.0)",
    )
    p.add_argument(
        "--secrets-dir",
        help=f"directory the Secrets are mounted under; secret files elsewhere are refused "
        f"(default ${SECRETS_DIR_ENV}, else {secrets_dir()})",
    )
    p.add_argument("--progress-interval", type=float, default=2.0, help="seconds between progress lines per file")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["model"]:  # kaiwo-ctrl download model <url> <dir>: a Model's cache/adapter loader
        from .model import main as model_main

        return model_main(argv[1:])
    parser = build_parser()
    log = EventLog(level="INFO")
    try:
        args = parser.parse_args(argv)
    except _ArgError as exc:
        log.error("bad_arguments", error=str(exc), exit_code=int(ExitCode.CONFIG))
        return int(ExitCode.CONFIG)
    log = EventLog(level=args.log_level)
    config_path = args.config or args.config_pos
    if not config_path:
        log.error("bad_arguments", error="a config file is required (--config FILE)", exit_code=int(ExitCode.CONFIG))
        return int(ExitCode.CONFIG)
    if args.parallel < 1 or args.retries < 1:
        log.error("bad_arguments", error="--parallel and --retries must be at least 1", exit_code=int(ExitCode.CONFIG))
        return int(ExitCode.CONFIG)
    if args.secrets_dir:
        os.environ[SECRETS_DIR_ENV] = args.secrets_dir
    try:
        return run(config_path, args, log)
    except DownloadError as exc:
        log.error("failed", item=exc.item or None, kind=exc.kind, exit_code=int(exc.exit_code), error=exc.message)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        log.error("interrupted", exit_code=130)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: print it scrubbed
        # Whatever a library raised may quote a credential; the traceback goes
        # through the same scrubbing log as everything else, never to raw stderr.
        log.error(
            "failed",
            kind="internal",
            exit_code=int(ExitCode.INTERNAL),
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(limit=20),
        )
        return int(ExitCode.INTERNAL)


def run(config_path: str, args: argparse.Namespace, log: EventLog) -> int:
    started = time.monotonic()
    cfg = DownloadConfig.from_file(config_path)
    data_dir = Path(args.data_dir or cfg.download_root or DEFAULT_DATA_DIR)
    hf_dir = Path(args.hf_dir or cfg.hf_home or os.environ.get("HF_HOME") or DEFAULT_HF_DIR)
    _register_secrets(cfg, log)
    ctx = Context(
        data_dir=data_dir,
        hf_dir=hf_dir,
        log=log,
        policy=RetryPolicy(attempts=args.retries, base_delay=args.retry_delay, max_delay=max(args.retry_delay, 30.0)),
        parallel=args.parallel,
        progress_interval=args.progress_interval,
    )
    log.info(
        "start",
        config=config_path,
        data_dir=str(data_dir),
        hf_dir=str(hf_dir),
        parallel=args.parallel,
        s3=len(cfg.s3 or []),
        gcs=len(cfg.gcs or []),
        azure_blob=len(cfg.azure_blob or []),
        git=len(cfg.git or []),
        hf=len(cfg.hf or []),
    )
    if cfg.is_empty():
        log.info("done", tasks=0, seconds=round(time.monotonic() - started, 3))
        return int(ExitCode.OK)
    result = _run_sources(cfg, ctx, log, args.parallel)
    return _report(result, log, round(time.monotonic() - started, 3))


def _register_secrets(cfg: DownloadConfig, log: EventLog) -> None:
    """Read every mounted secret once, up front: a missing mount fails before any
    transfer starts, and each value is scrubbed from all later log output."""
    for label, ref in cfg.value_references():
        for fragment in secret_fragments(read_secret(ref, label)):
            log.add_secret(fragment)
    # Credentials written into URLs (git repository, S3 endpointUrl) too.
    for url in [s.endpoint_url for s in cfg.s3 or []] + [g.repository for g in cfg.git or []]:
        for fragment in url_credentials(url):
            log.add_secret(fragment)
    for env_name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if os.environ.get(env_name):
            log.add_secret(os.environ[env_name])


def _run_sources(cfg: DownloadConfig, ctx: Context, log: EventLog, parallel: int) -> RunResult:
    """Plan every source's items and run the tasks; the sources' clients are closed after."""
    closers: list = []
    tasks: list[Task] = []
    try:
        for source, items in (
            ("s3", cfg.s3),
            ("gcs", cfg.gcs),
            ("azureBlob", cfg.azure_blob),
            ("hf", cfg.hf),
            ("git", cfg.git),
        ):
            if items:
                tasks.extend(_plan(source, items, ctx, closers))
        return Runner(log, parallel).run(tasks)
    finally:
        for close in closers:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


def _report(result: RunResult, log: EventLog, seconds: float) -> int:
    """Log the outcome of the run and return the process exit code."""
    if result.failures:
        first = result.failures[0]
        log.error(
            "failed",
            item=first.item,
            kind=first.kind,
            exit_code=result.exit_code,
            error=first.message,
            failed_items=sorted({f.item for f in result.failures}),
            seconds=seconds,
        )
        return result.exit_code
    log.info("done", tasks=result.tasks_done, seconds=seconds)
    return int(ExitCode.OK)


# the module that plans each source's items (imported on use: each needs its own optional library)
_SOURCE_MODULES = {"s3": "s3", "gcs": "gcs", "azureBlob": "azure", "git": "git", "hf": "huggingface"}


def _plan(source: str, items: list, ctx: Context, closers: list) -> list[Task]:
    try:
        mod = importlib.import_module("." + _SOURCE_MODULES[source], __package__)
    except ImportError as exc:
        raise ConfigError(f"{source} downloads need an optional library that is not installed: {exc.name}") from None
    try:
        return mod.plan(items, ctx, closers)
    except DownloadError as exc:
        raise exc.for_item(source)
    except Exception as exc:  # noqa: BLE001 - e.g. an unparsable endpoint URL
        raise ConfigError(f"cannot set up {source} client: {type(exc).__name__}: {exc}", item=source) from None
