"""``kaiwo``: argument parsing, the event loop and the exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kaiwo_ctrl.runtime.process import loop
from kaiwo_ctrl.runtime.api.client import ApiError

from .sanitize import inert
from . import (
    cmd_delete,
    cmd_exec,
    cmd_list,
    cmd_logs,
    cmd_manage,
    cmd_monitor,
    cmd_port_forward,
    cmd_status,
    cmd_submit,
    config,
)
from .errors import INTERRUPTED, CliError
from .kube import check_crds, connect, explain

EXIT_CODES = """exit codes:
  0  success
  1  the workload FAILED or went to ERROR (--wait), or the cluster refused the request
  2  bad command line or input file
  3  no cluster: no kubeconfig, or the API server cannot be reached
  4  the Kaiwo CRDs are not installed
  5  permission denied (the message names the verb and the resource)
  6  workload not found
  7  no logs available
  8  --wait --timeout ran out
  9  exec / port-forward: the pod is not running
  any other: kaiwo exec passes on the remote command's exit code
"""

DESCRIPTION = """Run AI workloads on a Kaiwo cluster without writing YAML.

User defaults (user, clusterQueue, namespace, image) come from
$KAIWOCONFIG or ~/.config/kaiwo/kaiwoconfig.yaml. Flags win over a workload
file (-f), which wins over the workload directory's kaiwoconfig.yaml (-p),
which wins over the user file."""

COMMANDS = (cmd_submit, cmd_list, cmd_status, cmd_logs, cmd_exec, cmd_port_forward, cmd_monitor, cmd_manage, cmd_delete)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    conn = common.add_argument_group("cluster connection")
    conn.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    conn.add_argument("--context", help="kubeconfig context to use (default: the current context)")
    parser = argparse.ArgumentParser(
        prog="kaiwo",
        description=DESCRIPTION,
        epilog="examples:\n  kaiwo submit -i python:3.12 --entrypoint 'python -c \"print(42)\"' --wait\n"
        "  kaiwo list\n  kaiwo status my-job\n  kaiwo logs -f my-job\n  kaiwo delete my-job\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(sub, common)
    return parser


async def _run(args: argparse.Namespace) -> int:
    defaults = config.resolve(getattr(args, "workload_dir", None))
    for w in defaults.warnings:
        print(f"kaiwo: warning: {inert(w)}", file=sys.stderr)
    if getattr(args, "offline", None) and args.offline(args):
        return await args.run(args, None, defaults)
    client = await connect(args.kubeconfig, args.context)
    try:
        await check_crds(client)
        return await args.run(args, client, defaults)
    except ApiError as e:
        raise explain(e, client) from None
    finally:
        await client.close()


#: The Go CLI reads the manifest from stdin for ``-f -`` and ``-f --``.
STDIN_FILE_FLAGS = ("-f", "--file")


def stdin_file_args(argv: Sequence[str]) -> list[str]:
    """``submit -f --`` (which argparse would take as the end of the options) becomes ``-f -``.

    Only for ``submit``, and only before a ``--`` that ends the options: ``kaiwo exec x -- tail -f -- f``
    keeps its command as typed."""
    out = list(argv)
    if out[:1] != ["submit"]:
        return out
    for i, arg in enumerate(out):
        if arg == "--file=--":
            out[i] = "--file=-"
        elif arg == "--" and not (i and out[i - 1] in STDIN_FILE_FLAGS):
            break
        elif arg in STDIN_FILE_FLAGS and i + 1 < len(out) and out[i + 1] == "--":
            out[i + 1] = "-"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    options, command = cmd_exec.split_command(stdin_file_args(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(options)
    if command:
        args.argv = command
    try:
        return loop.run(_run(args))
    except CliError as e:
        print(f"kaiwo: error: {inert(e.message, layout=True)}", file=sys.stderr)  # may quote the API server
        return e.code
    except KeyboardInterrupt:
        print("kaiwo: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `kaiwo logs x | head`
        return 0


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
