"""The listeners of ``kaiwo-ctrl run`` and ``kaiwo-ctrl proxy``, by flag, bound at start-up.

:func:`bind_or_exit_code` binds every listener the command owns before anything else
starts (see :mod:`kaiwo_ctrl.runtime.process.listeners`); :func:`failed` reports one
that cannot bind, naming its flag, as a log line and one line on stderr, and gives the
documented exit code (3, docs/operations.md).
"""

from __future__ import annotations

import argparse
import logging
import sys

from kaiwo_ctrl.runtime.process.listeners import EXIT_LISTENER, ListenerError, check_binds

__all__ = ["ListenerError", "bind_or_exit_code", "failed", "listeners"]

log = logging.getLogger("kaiwo_ctrl")


def listeners(args: argparse.Namespace) -> dict[str, str | None]:
    """Flag -> address of every listener of ``run``/``proxy`` (``0`` is off)."""
    out = {"--health-probe-bind-address": args.health_probe_bind_address, "--metrics-bind-address": args.metrics_bind_address,
           "--proxy-bind-address": args.proxy_bind_address}
    if args.proxy_bind_address and args.proxy_bind_address != "0":  # the Gateway listener runs only with the proxy
        out["--proxy-gateway-bind-address"] = args.proxy_gateway_bind_address
    if args.cmd == "run":
        out["--webhook-bind-address"] = args.webhook_bind_address
    return out


def failed(args: argparse.Namespace, e: ListenerError) -> int:
    log.error("listener cannot bind, exiting", extra={"flag": e.flag, "address": e.address, "error": e.reason})
    print(f"kaiwo-ctrl {args.cmd}: {e}", file=sys.stderr)
    return EXIT_LISTENER


def bind_or_exit_code(args: argparse.Namespace) -> int | None:
    """None when every listener can bind; else the exit code, the failure reported."""
    try:
        check_binds(listeners(args))
    except ListenerError as e:
        return failed(args, e)
    return None
