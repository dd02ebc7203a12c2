"""How the client names a kind of the API (:class:`Resource`), reports a failed
request (:class:`ApiError`) and retries a read-modify-write on conflict."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

T = TypeVar("T")


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: group/version/plural, its kind and scope."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        if subresource:
            base += f"/{subresource}"
        return base

    def key(self, obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata", {})
        ns = meta.get("namespace")
        return f"{ns}/{meta['name']}" if self.namespaced and ns else meta["name"]

    def __str__(self) -> str:
        return f"{self.plural}.{self.group or 'core'}/{self.version}"


class ApiError(Exception):
    """An error status from the API server (or a transport failure, status 0)."""

    def __init__(self, status: int, body: Any = None, method: str = "", path: str = "", retry_after: float | None = None):
        self.status = status
        self.body = body if isinstance(body, dict) else {}
        self.reason = self.body.get("reason", "") if self.body else ""
        self.message = self.body.get("message", "") if self.body else (str(body) if body else "")
        self.method = method
        self.path = path
        self.retry_after = retry_after
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}".strip())

    @classmethod
    def transport_failure(cls, exc: BaseException, method: str, path: str) -> ApiError:
        """No answer from the server (refused, reset, timed out): status 0."""
        return cls(0, str(exc) or type(exc).__name__, method, path)

    @classmethod
    def from_answer(cls, status: int, body: Any, method: str, path: str, retry_after: bytes | None = None) -> ApiError:
        """An error answer, with its decoded body and any ``Retry-After`` header."""
        return cls(status, body, method, path, float(retry_after) if retry_after else None)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def invalid(self) -> bool:
        return self.status == 422

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def retriable(self) -> bool:
        return self.status in (0, 429, 500, 502, 503, 504) or self.conflict


def resource_of(path: str) -> str:
    """``/apis/g/v/namespaces/ns/jobs/x/status`` -> ``jobs/status``; ``/api/v1/nodes`` -> ``nodes``."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if not parts:
        return ""
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return ""
    return f"{rest[0]}/{rest[2]}" if len(rest) > 2 else rest[0]


async def retry_on_conflict(
    fn: Callable[[], Awaitable[T]], attempts: int = 5, base_delay: float = 0.01, max_delay: float = 1.0
) -> T:
    """Run a read-modify-write ``fn`` again on 409 Conflict, with jittered backoff.

    ``fn`` must re-read the object itself on every call: retrying a write with
    the same stale resourceVersion can only fail again.
    """
    delay = base_delay
    for attempt in range(attempts):
        try:
            return await fn()
        except ApiError as e:
            if not e.conflict or attempt == attempts - 1:
                raise
            await asyncio.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, max_delay)
    raise AssertionError("unreachable")  # pragma: no cover
