"""Kubernetes' WebSocket channel framing for exec and port-forward (pure functions).

Every binary WebSocket message carries one channel byte, then the payload.

exec (``v5.channel.k8s.io``): 0 stdin, 1 stdout, 2 stderr, 3 error (one
``Status`` object when the command ends), 4 resize (``{"Width": w,
"Height": h}``); v5 adds 255, ``[255, channel]``, which closes that channel
(the client's end of stdin) without closing the connection.

port-forward (``v4.channel.k8s.io``, proxied to the kubelet): one port per
connection here; channel 0 carries data both ways and channel 1 the
kubelet's errors; the first message on each channel is the port, two bytes
little-endian, before any data.
"""

from __future__ import annotations

import re
import struct
from typing import Any

import orjson

EXEC_PROTOCOL = "v5.channel.k8s.io"
PORT_FORWARD_PROTOCOL = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE = 255
PF_DATA, PF_ERROR = 0, 1
_GO_EXIT = re.compile(r": exit status (\d{1,3})\s*$")


class ChannelError(ValueError):
    """A message that does not follow the framing (empty, or an unknown channel)."""


def frame(channel: int, data: bytes = b"") -> bytes:
    """One message: the channel byte, then ``data``."""
    if not 0 <= channel <= 255:
        raise ChannelError(f"channel {channel} out of range")
    return bytes((channel,)) + data


def parse(message: bytes, channels: frozenset[int] | None = None) -> tuple[int, bytes]:
    """(channel, payload) of one message; ``channels`` limits the channels accepted."""
    if not message:
        raise ChannelError("empty message (no channel byte)")
    channel = message[0]
    if channels is not None and channel not in channels:
        raise ChannelError(f"unexpected channel {channel}")
    return channel, message[1:]


def close_stdin() -> bytes:
    """v5: the client has no more input (the remote command sees end of file)."""
    return bytes((CLOSE, STDIN))


def resize(width: int, height: int) -> bytes:
    """A terminal size message; sizes are clamped to what the kubelet's uint16 fields hold."""
    w, h = (max(0, min(int(v), 65535)) for v in (width, height))
    return frame(RESIZE, orjson.dumps({"Width": w, "Height": h}))


class ExecFailure(Exception):
    """The exec failed before or instead of the command's exit (no such executable, ...)."""


def exit_code(payload: bytes) -> int:
    """The remote command's exit status from the error channel's ``Status``.

    ``Success`` is 0; ``NonZeroExitCode`` carries the code in a cause of reason
    ``ExitCode``; anything else (the command could not start) is an
    :class:`ExecFailure` with the server's message.
    """
    try:
        status: Any = orjson.loads(payload) if payload.strip() else {"status": "Success"}
    except orjson.JSONDecodeError:
        raise ExecFailure(payload[:500].decode(errors="replace")) from None
    if not isinstance(status, dict):
        raise ExecFailure(f"unexpected status {str(status)[:200]}")
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
                try:
                    return max(0, min(int(cause.get("message", "")), 255))
                except ValueError:
                    break
    message = str(status.get("message") or status.get("reason") or "exec failed")
    # A kubelet that reports the exit as an internal error whose message ends in Go's
    # os/exec wording ("...: exit status 3"), as kwok's simulated kubelet does, still
    # ran the command: its status is the exit code.
    tail = _GO_EXIT.search(message) if status.get("reason") == "InternalError" else None
    if tail:
        return min(int(tail.group(1)), 255)
    raise ExecFailure(message[:500])


def port_prefix(payload: bytes) -> tuple[int, bytes]:
    """(port, rest) of the first message of a port-forward channel."""
    if len(payload) < 2:
        raise ChannelError("port-forward channel opened without its 2-byte port")
    (port,) = struct.unpack("<H", payload[:2])
    return port, payload[2:]
