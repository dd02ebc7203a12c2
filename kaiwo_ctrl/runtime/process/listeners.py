"""A process's listeners, bound once at start-up before anything else starts.

A port already in use, an address that is not this host's, or a malformed
``host:port`` is an error naming the flag that set it, and the process exits
with :data:`EXIT_LISTENER` before it connects to the API server, starts an
informer or takes the leader lease: the process that owns the listener fails,
not a sibling, and not half-started. ``check_binds`` binds each address the way
the servers will (``SO_REUSEADDR``, every address the host resolves to), listens,
and releases it at once.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Mapping

#: Exit code of a process one of whose listeners cannot bind (documented in docs/operations.md).
EXIT_LISTENER = 3


class ListenerError(Exception):
    """A listener address that cannot be served; ``str()`` names the flag, e.g.
    ``--proxy-gateway-bind-address 0.0.0.0:8001: address already in use``."""

    def __init__(self, flag: str, address: str, reason: str) -> None:
        super().__init__(f"{flag} {address}: {reason}")
        self.flag, self.address, self.reason = flag, address, reason


def parse_bind(flag: str, addr: str | None) -> tuple[str, int] | None:
    """``:8000`` -> all interfaces, ``[::1]:8000`` -> IPv6; ``0`` or empty disables; else a :class:`ListenerError`."""
    if not addr or addr == "0":
        return None
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenerError(flag, addr, "not HOST:PORT with a port 0-65535 (or '0' to disable)")
    return (host.strip("[]") or "0.0.0.0", int(port))


def bind_reason(e: OSError) -> str:
    """Why a bind failed, in a few words."""
    if e.errno == errno.EADDRINUSE:
        return "address already in use"
    if e.errno == errno.EADDRNOTAVAIL:
        return "address not available on this host"
    if e.errno == errno.EACCES:
        return "permission denied (a port below 1024 needs privileges)"
    return e.strerror or str(e)


def _try_bind(host: str, port: int) -> None:
    """Bind and listen on every address ``host`` resolves to, as asyncio's create_server does; then release."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    held: list[socket.socket] = []
    try:
        for family, kind, proto, _, sockaddr in dict.fromkeys(infos):
            s = socket.socket(family, kind, proto)
            held.append(s)
            if os.name == "posix":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(sockaddr)
            s.listen(1)
    finally:
        for s in held:
            s.close()


def check_binds(listeners: Mapping[str, str | None]) -> None:
    """Bind every listener (flag -> address; ``0`` or empty is off) and release it; raise a
    :class:`ListenerError` naming the first flag that cannot be served. Two flags on one
    address are an error too, except the health and metrics flags, which share a server."""
    seen: dict[tuple[str, int], str] = {}
    for flag, addr in listeners.items():
        bind = parse_bind(flag, addr)
        if bind is None:
            continue
        other = seen.get(bind)
        if other is not None and bind[1] != 0:
            if {flag, other} == {"--health-probe-bind-address", "--metrics-bind-address"}:
                continue
            raise ListenerError(flag, str(addr), f"the same address as {other}")
        seen[bind] = flag
        try:
            _try_bind(*bind)
        except socket.gaierror as e:
            raise ListenerError(flag, str(addr), f"cannot resolve host {bind[0]!r}: {e.strerror}") from None
        except OSError as e:
            raise ListenerError(flag, str(addr), bind_reason(e)) from None
