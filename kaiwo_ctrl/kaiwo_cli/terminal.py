"""The local terminal of ``kaiwo exec``: raw mode, stdin as chunks, size changes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import sys
from collections.abc import AsyncIterator, Iterator

from . import channels as ch

CHUNK = 32 * 1024


def is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal in raw mode (keys go to the remote side as typed, Ctrl-C included); restored after."""
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def read_chunks(fd: int) -> AsyncIterator[bytes]:
    """What arrives on ``fd`` until end of file; pipes and terminals through the event loop's reader."""
    if stat.S_ISREG(os.fstat(fd).st_mode):  # a file cannot be polled: read it in pieces
        while data := os.read(fd, CHUNK):
            yield data
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=64)
    paused = False

    def readable() -> None:
        nonlocal paused
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        queue.put_nowait(data)
        if not data or queue.full():  # end of input, or back-pressure until the sender catches up
            loop.remove_reader(fd)
            paused = bool(data)

    loop.add_reader(fd, readable)
    try:
        while data := await queue.get():
            if paused:
                paused = False
                loop.add_reader(fd, readable)
            yield data
    finally:
        loop.remove_reader(fd)


def size() -> tuple[int, int]:
    columns, lines = shutil.get_terminal_size()
    return columns, lines


async def sizes() -> AsyncIterator[tuple[int, int]]:
    """The terminal size now, then again on every SIGWINCH."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()
    loop.add_signal_handler(signal.SIGWINCH, changed.set)
    try:
        yield size()
        while True:
            await changed.wait()
            changed.clear()
            yield size()
    finally:
        loop.remove_signal_handler(signal.SIGWINCH)


def write_output(channel: int, data: bytes) -> None:
    stream = sys.stderr.buffer if channel == ch.STDERR else sys.stdout.buffer
    stream.write(data)
    stream.flush()
