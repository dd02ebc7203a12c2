"""``kaiwo manage``: the terminal UI (:mod:`.tui`, on Textual, an optional extra)."""

from __future__ import annotations

import argparse

from kaiwo_ctrl.runtime.api.client import Client

from .config import Defaults
from .errors import USAGE, CliError

EXAMPLES = """keys (on the selected workload):
  l logs    f follow logs    e run a command    s shell    p port-forward    x stop port-forwards
  m GPU monitor    d delete (asks)    / filter    r refresh    q quit

Needs the optional UI library: pip install 'kaiwo-ctrl[tui]'.
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "manage", parents=[common], help="a terminal UI: pick a workload, then logs, exec, port-forward, monitor, delete",
        description="A keyboard-only terminal UI (works over SSH) listing your workloads, refreshed as they change.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-n", "--namespace", help="namespace (default: from kaiwoconfig.yaml, else 'default')")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--user", help="this user's workloads (default: you, from kaiwoconfig.yaml)")
    who.add_argument("--all-users", action="store_true", help="workloads of every user")
    p.add_argument("--metrics-endpoint", metavar="URL", help="the GPU exporter's /metrics URL for the monitor key")
    p.add_argument("--refresh", type=float, default=3.0, metavar="SECONDS", help="list refresh period (default 3)")
    p.set_defaults(run=run)


async def run(args: argparse.Namespace, client: Client, defaults: Defaults) -> int:
    try:
        from .tui import ManageApp, Options
    except ImportError:
        raise CliError("kaiwo manage needs its UI library: pip install 'kaiwo-ctrl[tui]' (Textual)", USAGE) from None
    conn = [*(["--kubeconfig", args.kubeconfig] if args.kubeconfig else []),
            *(["--context", args.context] if args.context else [])]
    options = Options(
        namespace=args.namespace or defaults.namespace,
        user=None if args.all_users else (args.user or defaults.user),
        metrics_endpoint=args.metrics_endpoint, refresh=args.refresh, connection_args=tuple(conn),
    )
    return await ManageApp(client, options).run_async() or 0
