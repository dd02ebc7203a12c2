"""``kaiwo port-forward NAME [LOCAL:]REMOTE...``: local ports to a workload's pod, through the API server."""

from __future__ import annotations

import argparse
import sys

from kaiwo_ctrl.runtime.api.client import Client

from .sanitize import inert
from . import streams
from .config import Defaults
from .errors import USAGE, CliError
from .podpick import target_pod

EXAMPLES = """examples:
  kaiwo port-forward service/my-llm 8000            # 127.0.0.1:8000 -> pod port 8000
  kaiwo port-forward my-job 18265:8265              # Ray's dashboard on 127.0.0.1:18265
  kaiwo port-forward my-job :8888                   # a free local port, printed
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "port-forward", parents=[common], help="forward local ports to a running pod of a workload",
        description="Listen on local ports and tunnel each connection to a port of a running pod of the "
        "workload, through the API server, until interrupted.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("ports", nargs="+", metavar="[LOCAL:]REMOTE", help="LOCAL 0 or empty: a free port")
    p.add_argument("-n", "--namespace", help="namespace (default: from kaiwoconfig.yaml, else 'default')")
    p.add_argument("--pod", help="this pod of the workload (default: the first one running)")
    p.add_argument("--address", default="127.0.0.1", help="local address to listen on (default 127.0.0.1)")
    p.set_defaults(run=run)


def parse_ports(specs: list[str]) -> list[tuple[int, int]]:
    out = []
    for spec in specs:
        local, sep, remote = spec.rpartition(":")
        if not sep:
            local = remote
        try:
            pair = int(local or 0), int(remote)
        except ValueError:
            raise CliError(f"port {spec!r}: expected [LOCAL:]REMOTE, e.g. 8000 or 18000:8000", USAGE) from None
        if not (0 <= pair[0] < 65536 and 0 < pair[1] < 65536):
            raise CliError(f"port {spec!r}: ports are 1-65535 (LOCAL may be 0: any free port)", USAGE)
        out.append(pair)
    return out


async def run(args: argparse.Namespace, client: Client, defaults: Defaults) -> int:
    mappings = parse_ports(args.ports)
    namespace = args.namespace or defaults.namespace
    label, pod = await target_pod(client, namespace, args.name, args.pod)
    await streams.check_access(client, namespace, "portforward")
    name = pod["metadata"]["name"]

    def ready(bound: list[tuple[str, int, int]]) -> None:
        for address, local, remote in bound:
            print(inert(f"Forwarding from {address}:{local} -> {remote} (pod {name} of {label})"), flush=True)
        print("Press Ctrl-C to stop.", file=sys.stderr, flush=True)

    await streams.forward(client, namespace, name, mappings, args.address, ready)
    return 0
