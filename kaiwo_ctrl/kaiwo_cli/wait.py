"""``--wait``: follow a workload's status until it runs or ends, with a progress line."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import EVENTS

from .sanitize import inert
from .errors import FAILED, NOT_FOUND, TIMEOUT, CliError
from .kube import KINDS, explain
from .output import human_duration, status_text

UP = {"RUNNING", "READY"}
SUCCESS = {"COMPLETE"}
FAILURE = {"FAILED", "ERROR", "TERMINATED"}


def _status(obj: dict[str, Any]) -> str:
    return (obj.get("status") or {}).get("status") or ""


def _done(status: str, until: str) -> bool:
    return status in SUCCESS | FAILURE or (until == "running" and status in UP)


def detail(obj: dict[str, Any]) -> str:
    """The most telling condition message: the first condition that is not True."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("status") != "True" and c.get("message"):
            return f"{c.get('type')}: {c['message']}"
    return ""


class Progress:
    """One line rewritten in place on a terminal; a new line per change otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.tty = sys.stderr.isatty()
        self.last = ""
        self.t0 = time.monotonic()

    def show(self, obj: dict[str, Any]) -> None:
        status = _status(obj) or "NEW"
        text = f"{inert(self.label)}: {status_text(status, sys.stderr)}"
        info = detail(obj)
        if info:
            text += f" ({inert(info)})"
        if self.tty:
            elapsed = human_duration(time.monotonic() - self.t0)
            sys.stderr.write(f"\r\033[K{text} [{elapsed}]")
            sys.stderr.flush()
        elif text != self.last:
            print(text, file=sys.stderr, flush=True)
        self.last = text

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


async def follow(client: Client, kind: str, namespace: str, name: str, *, until: str = "running",
                 timeout: float = 0) -> int:
    """Exit 0 when up (or COMPLETE), 1 with the condition messages on FAILED/ERROR."""
    res = KINDS[kind]
    progress = Progress(f"{kind.lower()}/{name}")
    deadline = time.monotonic() + timeout if timeout > 0 else None
    try:
        obj = await _watch_until(client, res, namespace, name, until, progress, deadline)
    finally:
        progress.end()
    status = _status(obj)
    if status in UP | SUCCESS:
        print(inert(f"{kind.lower()}/{name} {status}"))
        return 0
    if status not in FAILURE:
        raise CliError(f"{kind.lower()}/{name} is still {status or 'NEW'} after {timeout:g}s", TIMEOUT)
    reasons = [f"{c.get('type')}: {c.get('message')}" for c in (obj.get("status") or {}).get("conditions") or []
               if c.get("status") != "True" and c.get("message")]
    reasons += await _warnings(client, namespace, obj)
    msg = inert(f"{kind.lower()}/{name} {status}") + "".join(f"\n  {inert(r)}" for r in reasons)
    print(msg, file=sys.stderr)
    return FAILED


async def _watch_until(client: Client, res, namespace: str, name: str, until: str, progress: Progress,
                       deadline: float | None) -> dict[str, Any]:
    while True:
        try:
            obj = await client.get(res, name, namespace)
        except ApiError as e:
            raise explain(e, client, what=f"{res.kind} {name!r} in namespace {namespace!r}") from None
        progress.show(obj)
        if _done(_status(obj), until) or _expired(deadline):
            return obj
        window = 30 if deadline is None else max(1, min(30, int(deadline - time.monotonic()) + 1))
        try:
            async for ev in client.watch(res, namespace, resource_version=obj["metadata"]["resourceVersion"],
                                         field_selector=f"metadata.name={name}", timeout_seconds=window):
                if ev.get("type") == "DELETED":
                    raise CliError(f"{res.kind.lower()}/{name} was deleted while waiting", NOT_FOUND)
                if ev.get("type") not in ("ADDED", "MODIFIED"):
                    continue
                obj = ev["object"]
                progress.show(obj)
                if _done(_status(obj), until) or _expired(deadline):
                    return obj
        except ApiError as e:
            if e.status not in (0, 410):
                raise explain(e, client) from None
            await asyncio.sleep(1)  # a dropped or expired watch: read again, then watch again
        if _expired(deadline):
            return obj


def _expired(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


async def _warnings(client: Client, namespace: str, obj: dict[str, Any]) -> list[str]:
    """The workload's recent Warning events (best effort)."""
    try:
        out = await client.list(EVENTS, namespace, field_selector=f"involvedObject.uid={obj['metadata']['uid']}")
    except ApiError:
        return []
    items = [e for e in out.get("items") or [] if e.get("type") == "Warning"]
    return [f"{e.get('reason')}: {e.get('message')}" for e in items[-3:]]


