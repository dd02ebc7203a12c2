"""Source-independent machinery of the downloader (placement on disk is in
:mod:`kaiwo_ctrl.download.placement`).

* :class:`DownloadError` and its subclasses carry the exit code (see the package
  docstring) and the name of the failing item.
* :class:`EventLog` writes one JSON object per line to stderr and scrubs every
  registered secret value from everything it writes.
* :func:`with_retries` retries :class:`TransientError` with capped exponential
  backoff and jitter.
* :class:`ProgressMeter` turns byte callbacks into rate-limited progress events.
* :class:`Runner` executes tasks in a bounded thread pool; a task may return
  further tasks (a folder listing returns one task per object).
"""

from __future__ import annotations

import concurrent.futures
import enum
import json
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

T = TypeVar("T")


class ExitCode(enum.IntEnum):
    OK = 0
    INTERNAL = 1
    CONFIG = 2
    AUTH = 3
    NOT_FOUND = 4
    TRANSIENT = 5


class DownloadError(Exception):
    """A failure attributed to one item of the download configuration."""

    exit_code: ExitCode = ExitCode.INTERNAL
    kind = "error"

    def __init__(self, message: str, *, item: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.item = item

    def for_item(self, item: str) -> DownloadError:
        if not self.item:
            self.item = item
        return self

    def __str__(self) -> str:
        return f"{self.item}: {self.message}" if self.item else self.message


class ConfigError(DownloadError):
    exit_code = ExitCode.CONFIG
    kind = "config"


class AuthError(DownloadError):
    exit_code = ExitCode.AUTH
    kind = "auth"


class NotFoundError(DownloadError):
    exit_code = ExitCode.NOT_FOUND
    kind = "not_found"


class TransientError(DownloadError):
    exit_code = ExitCode.TRANSIENT
    kind = "transient"


# --------------------------------------------------------------------------- logging


class EventLog:
    """Structured JSON-lines log with secret scrubbing.

    Every value registered through :meth:`add_secret` is replaced by ``***`` in
    each emitted line (keys and values alike), so a secret that leaks into an
    exception message from a client library still never reaches the log.

    Scrubbing runs on the field values *before* JSON encoding (a secret holding
    ``"`` or ``\\`` is escaped by the encoder and would no longer match), and
    once more on the encoded line for the escaped and URL-quoted forms.
    """

    def __init__(self, stream: IO[str] | None = None, level: str = "INFO") -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        self._ordered: list[str] = []
        self._min = _LEVELS.get(level.upper(), 20)

    def add_secret(self, value: str) -> None:
        value = value.strip()
        # Very short values would scrub ordinary words; credentials are longer.
        if len(value) >= 4:
            from urllib.parse import quote

            # The value itself plus the forms it takes inside URLs, JSON strings
            # and repr() output (Python exception messages).
            forms = {value, quote(value, safe=""), quote(value), json.dumps(value, ensure_ascii=False)[1:-1],
                     json.dumps(value)[1:-1], repr(value)[1:-1]}
            with self._lock:
                self._secrets.update(f for f in forms if len(f) >= 4)
                self._ordered = sorted(self._secrets, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for secret in self._ordered:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    def scrub_value(self, value: Any) -> Any:
        """``value`` with secrets replaced in every string inside it (dict keys too)."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {self.scrub(str(k)): self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self.scrub_value(v) for v in value]
        if value is None or isinstance(value, (bool, int, float)):
            return value
        return self.scrub(str(value))

    def emit(self, level: str, event: str, **fields: Any) -> None:
        if _LEVELS.get(level, 20) < self._min:
            return
        record = {"ts": round(time.time(), 3), "level": level, "event": event}
        record.update({k: v for k, v in fields.items() if v is not None})
        line = json.dumps(self.scrub_value(record), default=str, ensure_ascii=False)
        line = self.scrub(line)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def info(self, event: str, **fields: Any) -> None:
        self.emit("INFO", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self.emit("WARNING", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self.emit("ERROR", event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        self.emit("DEBUG", event, **fields)


_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40}


# --------------------------------------------------------------------------- retries


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 20.0

    def delay(self, attempt: int) -> float:
        """Backoff before attempt ``attempt + 1`` (attempt counts from 1), full jitter on the upper half."""
        cap = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return cap / 2 + random.uniform(0, cap / 2)


def with_retries(
    fn: Callable[[], T],
    *,
    item: str,
    policy: RetryPolicy,
    log: EventLog,
    classify: Callable[[BaseException], DownloadError] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``fn``; retry transient failures, re-raise permanent ones at once.

    ``classify`` maps a library exception to a :class:`DownloadError`; any
    exception it does not map is raised unchanged (a bug, exit code 1).
    """
    attempt = 1
    while True:
        try:
            return fn()
        except DownloadError as exc:
            err = exc
        except Exception as exc:  # mapped or re-raised below
            if classify is None:
                raise
            err = classify(exc)
            err.__cause__ = exc
        err.for_item(item)
        if not isinstance(err, TransientError) or attempt >= policy.attempts:
            if isinstance(err, TransientError):
                err.message = f"{err.message} (gave up after {attempt} attempts)"
            raise err
        wait = policy.delay(attempt)
        log.warning("retry", item=item, attempt=attempt, max_attempts=policy.attempts, delay_s=round(wait, 2), error=err.message)
        sleep(wait)
        attempt += 1


# --------------------------------------------------------------------------- progress


class ProgressMeter:
    """Thread-safe byte counter that logs at most every ``interval`` seconds."""

    def __init__(self, log: EventLog, item: str, name: str, total: int | None, interval: float = 2.0) -> None:
        self.log = log
        self.item = item
        self.name = name
        self.total = total
        self.interval = interval
        self.done = 0
        self.started = time.monotonic()
        self._last = self.started
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.done = 0
            self.started = time.monotonic()
            self._last = self.started

    def __call__(self, nbytes: int) -> None:
        emit = False
        with self._lock:
            self.done += nbytes
            now = time.monotonic()
            if now - self._last >= self.interval:
                self._last = now
                emit = True
            done = self.done
        if emit:
            self.log.info("progress", item=self.item, file=self.name, bytes=done, total=self.total, **rate_fields(done, now - self.started))

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def rate_fields(nbytes: int, seconds: float) -> dict[str, Any]:
    seconds = max(seconds, 1e-6)
    return {"seconds": round(seconds, 3), "rate_bps": int(nbytes / seconds), "rate": human_rate(nbytes / seconds)}


def human_rate(bps: float) -> str:
    for unit in ("B/s", "KiB/s", "MiB/s", "GiB/s"):
        if bps < 1024 or unit == "GiB/s":
            return f"{bps:.1f} {unit}"
        bps /= 1024
    return f"{bps:.1f} GiB/s"


# --------------------------------------------------------------------------- runner


@dataclass
class Task:
    """One unit of work. ``run`` returns follow-up tasks (or nothing)."""

    item: str
    run: Callable[[], Iterable[Task] | None]
    label: str = ""


@dataclass
class RunResult:
    failures: list[DownloadError] = field(default_factory=list)
    tasks_done: int = 0

    @property
    def exit_code(self) -> int:
        return int(self.failures[0].exit_code) if self.failures else int(ExitCode.OK)


class Runner:
    """Bounded parallel executor. After the first failure no new task starts;
    tasks already running finish (their placement is atomic either way)."""

    def __init__(self, log: EventLog, parallel: int) -> None:
        self.log = log
        self.parallel = max(1, parallel)

    def run(self, tasks: Iterable[Task]) -> RunResult:
        result = RunResult()
        pending: list[Task] = list(tasks)
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="dl") as pool:
            running: dict[concurrent.futures.Future, Task] = {}
            while pending or running:
                while pending and len(running) < self.parallel * 2 and not result.failures:
                    task = pending.pop(0)
                    running[pool.submit(task.run)] = task
                if not running:
                    break
                finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in finished:
                    task = running.pop(fut)
                    exc = fut.exception()
                    if exc is None:
                        result.tasks_done += 1
                        pending.extend(fut.result() or ())
                        continue
                    if isinstance(exc, DownloadError):
                        err = exc.for_item(task.item)
                    else:
                        err = DownloadError(f"unexpected {type(exc).__name__}: {exc}", item=task.item)
                        err.__cause__ = exc
                    result.failures.append(err)
                    self.log.error(
                        "item_failed",
                        item=err.item,
                        file=task.label or None,
                        kind=err.kind,
                        exit_code=int(err.exit_code),
                        error=err.message,
                    )
                if result.failures and pending:
                    pending.clear()
        return result
