"""Helpers shared by the integration and e2e tests."""

from __future__ import annotations

import asyncio


async def eventually(fn, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``fn`` (sync or async) until it returns a truthy value."""
    deadline = asyncio.get_running_loop().time() + timeout
    last = None
    while True:
        last = fn()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
        await asyncio.sleep(interval)
