"""``kaiwo delete NAME``: delete a workload (its children go with it), after confirmation."""

from __future__ import annotations

import argparse
import sys

from kaiwo_ctrl.runtime.api.client import ApiError, Client

from .sanitize import inert
from .config import Defaults
from .errors import FAILED, CliError
from .kube import KINDS, explain, find_workload

EXAMPLES = """examples:
  kaiwo delete my-job          # asks before deleting
  kaiwo delete -y my-job       # no question
  kaiwo delete service/my-llm -n ml-team -y
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "delete", aliases=["rm"], parents=[common], help="delete a workload and everything it created",
        description="Delete a KaiwoJob or KaiwoService. The Jobs, Deployments, pods and volumes it created "
        "are garbage-collected with it. Asks for confirmation unless -y is given.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("-n", "--namespace", help="namespace (default: from kaiwoconfig.yaml, else 'default')")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(run=run)


def confirm(question: str) -> bool:
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


async def run(args: argparse.Namespace, client: Client, defaults: Defaults) -> int:
    namespace = args.namespace or defaults.namespace
    obj = await find_workload(client, namespace, args.name)
    kind, name = obj["kind"], obj["metadata"]["name"]
    label = f"{kind.lower()}/{name}"
    if not args.yes and not confirm(f"Delete {label} in namespace {namespace} and everything it created?"):
        raise CliError("aborted; nothing was deleted", FAILED)
    await delete_workload(client, obj)
    print(inert(f"{label} deleted"))
    return 0


async def delete_workload(client: Client, obj: dict) -> str:
    """Delete the workload ``obj`` (only that one: its uid is a precondition); its ``kind/name``."""
    kind, meta = obj["kind"], obj["metadata"]
    label = f"{kind.lower()}/{meta['name']}"
    try:
        # the uid precondition makes sure a re-created workload of the same name is left alone
        await client.delete(KINDS[kind], meta["name"], meta["namespace"], uid=meta["uid"])
    except ApiError as e:
        raise explain(e, client, what=label) from None
    return label
