"""The event loop every kaiwo-ctrl process runs on.

uvloop (libuv) is a dependency because it roughly halves the CPU the event
loop and socket handling take per API request and per proxied request; the
standard asyncio loop is used when uvloop cannot be imported or when
``KAIWO_CTRL_UVLOOP=0`` (for comparisons and debugging).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop``, or None for asyncio's default loop."""
    if os.environ.get("KAIWO_CTRL_UVLOOP", "1") == "0":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def loop_name() -> str:
    return "uvloop" if event_loop_factory() is not None else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the loop :func:`event_loop_factory` picks."""
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(main)
