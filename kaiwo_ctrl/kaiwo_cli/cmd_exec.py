"""``kaiwo exec NAME -- COMMAND``: run a command in a workload's pod, over the ``v5.channel.k8s.io`` WebSocket."""

from __future__ import annotations

import argparse
import contextlib
import sys

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.api.resources import PODS

from . import channels as ch
from . import streams, terminal
from .config import Defaults
from .errors import USAGE, CliError
from .podpick import pick_container, target_pod

EXAMPLES = """examples:
  kaiwo exec my-job -- nvidia-smi            # one command; its exit code is kaiwo's
  kaiwo exec my-job -it --command bash       # an interactive shell
  echo 'print(1)' | kaiwo exec my-job -i --command python
  kaiwo exec service/my-llm -c vllm --pod my-llm-6f7d9-abcde -- ls /models
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "exec", parents=[common], help="run a command in a running pod of a workload",
        usage="kaiwo exec NAME [options] -- COMMAND [ARG ...]\n       kaiwo exec NAME [options] --command COMMAND [ARG ...]",
        description="Run a command in a running pod of a workload (the first one running, or --pod), "
        "through the API server. The exit code is the command's.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--command", dest="command_line", nargs=argparse.REMAINDER, metavar="COMMAND ...",
                   help="the command and its arguments (everything after it)")
    p.add_argument("-n", "--namespace", help="namespace (default: from kaiwoconfig.yaml, else 'default')")
    p.add_argument("--pod", help="this pod of the workload (default: the first one running)")
    p.add_argument("-c", "--container", help="container (default: the pod's default container, else its first)")
    p.add_argument("-i", "--stdin", action="store_true", help="pass standard input to the command")
    p.add_argument("-t", "--tty", action="store_true",
                   help="allocate a terminal (raw mode, size follows the window); only when stdin is a terminal")
    p.set_defaults(run=run, argv=[])


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """``exec NAME [options] -- COMMAND...``: (the options, the command), split at the first ``--``.

    argparse alone would not take options between NAME and ``--`` once it has seen a
    positional list; a ``--`` that follows ``--command`` belongs to the command."""
    if argv[:1] != ["exec"] or "--" not in argv:
        return list(argv), []
    i = argv.index("--")
    if "--command" in argv[:i]:
        return list(argv), []
    return list(argv[:i]), list(argv[i + 1:])


def command_of(args: argparse.Namespace) -> list[str]:
    command = list(args.command_line or []) or list(args.argv or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise CliError("no command: give it after -- or --command (e.g. `kaiwo exec NAME -- ls`)", USAGE)
    return command


async def run(args: argparse.Namespace, client: Client, defaults: Defaults) -> int:
    command = command_of(args)
    namespace = args.namespace or defaults.namespace
    tty = args.tty and terminal.is_terminal(sys.stdin.fileno()) and args.stdin
    if args.tty and not tty:
        print("kaiwo: warning: -t needs -i and a terminal on stdin; running without one", file=sys.stderr)
    _, pod = await target_pod(client, namespace, args.name, args.pod)
    container = pick_container(pod, args.container)
    await streams.check_access(client, namespace, "exec")
    query = streams.exec_query(container, command, stdin=args.stdin, tty=tty)
    ws = await streams.connect(client, PODS.path(namespace, pod["metadata"]["name"], "exec"), query,
                               ch.EXEC_PROTOCOL, namespace, "exec")
    fd = sys.stdin.fileno()
    with terminal.raw_mode(fd) if tty else contextlib.nullcontext():
        return await streams.run_exec(
            ws, terminal.write_output,
            stdin=terminal.read_chunks(fd) if args.stdin else None,
            sizes=terminal.sizes() if tty else None,
        )


