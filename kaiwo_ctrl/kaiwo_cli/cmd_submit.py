"""``kaiwo submit``: build a KaiwoJob (or KaiwoService) and create it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kaiwo_ctrl.runtime.api.client import ApiError, Client

from .sanitize import inert
from . import config
from .config import Defaults
from .errors import CliError
from .kube import KINDS, explain
from .output import dump_yaml
from .spec import STDIN_NAMES, SubmitFlags, build_workload
from .wait import follow

EXAMPLES = """examples:
  # a one-off job on 8 GPUs, following it until it runs
  kaiwo submit -i rocm/pytorch:latest --gpus 8 --entrypoint 'python train.py' --wait

  # from a workload directory holding entrypoint, env and kaiwoconfig.yaml
  kaiwo submit -p ./my-experiment --gpus 4 --queue team-a

  # from a manifest, overriding its queue, and wait until it finishes
  kaiwo submit -f job.yaml --queue team-a --wait --until done

  # a service with 2 replicas of 1 GPU each, printed instead of created
  kaiwo submit --service -i vllm/vllm-openai --gpus-per-replica 1 --replicas 2 --dry-run

precedence: flags > the -f file's fields > DIR/kaiwoconfig.yaml > $KAIWOCONFIG or
~/.config/kaiwo/kaiwoconfig.yaml > built-in defaults.
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "submit", parents=[common], help="create a KaiwoJob or KaiwoService from flags, a file or a directory",
        description="Build a KaiwoJob (or a KaiwoService with --service) and create it.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("sources")
    src.add_argument("-f", "--file", type=Path, help="a KaiwoJob/KaiwoService manifest (YAML or JSON; - for stdin)")
    src.add_argument("-p", "--path", dest="workload_dir", type=Path,
                     help="workload directory holding any of: entrypoint, env, kaiwoconfig.yaml")
    w = p.add_argument_group("workload")
    w.add_argument("--service", action="store_true", help="submit a KaiwoService instead of a KaiwoJob")
    w.add_argument("--name", help="workload name (default: your user name and a short random id)")
    w.add_argument("-n", "--namespace", help="namespace (default: from kaiwoconfig.yaml, else 'default')")
    w.add_argument("--user", help="your e-mail; goes into spec.user and the kaiwo.silogen.ai/user label")
    w.add_argument("-i", "--image", help="container image")
    w.add_argument("--gpus", type=_nonneg, help="total GPUs for the workload")
    w.add_argument("--gpus-per-replica", type=_nonneg, help="GPUs per replica (use with --replicas)")
    w.add_argument("--replicas", type=_positive, help="replicas (Ray workers or Deployment replicas)")
    w.add_argument("--gpu-vendor", help="GPU vendor: amd (default) or nvidia")
    w.add_argument("--ray", action="store_true", help="run on Ray (RayJob / RayService)")
    w.add_argument("--queue", help="Kueue ClusterQueue (default: kaiwoconfig.yaml clusterQueue, else the cluster's)")
    w.add_argument("--priority-class", help="Kueue WorkloadPriorityClass or PriorityClass")
    w.add_argument("--duration", help="maximum run time before it becomes preemptable, e.g. 8h or 1h30m")
    w.add_argument("--storage", metavar="SIZE[:CLASS]", help="a data volume of SIZE (e.g. 100Gi), of StorageClass CLASS")
    w.add_argument("-e", "--env", action="append", default=[], metavar="KEY=VALUE", help="environment variable (repeatable)")
    w.add_argument("--env-file", type=Path, help="KEY=VALUE lines, or a YAML list of EnvVar entries")
    w.add_argument("--entrypoint", help="command or script to run (a shebang picks the interpreter)")
    w.add_argument("--entrypoint-file", type=Path, help="a script file to run as the entrypoint")
    w.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="label on the workload (repeatable)")
    o = p.add_argument_group("output")
    o.add_argument("--dry-run", action="store_true", help="print the workload instead of creating it")
    o.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="format of --dry-run (default yaml)")
    o.add_argument("--wait", action="store_true",
                   help="follow the status until RUNNING/READY or terminal; non-zero exit on FAILED or ERROR")
    o.add_argument("--until", choices=("running", "done"), default="running",
                   help="with --wait: stop once running (default), or only when COMPLETE/FAILED")
    o.add_argument("--timeout", type=float, default=0, metavar="SECONDS", help="with --wait: give up after this long")
    p.set_defaults(run=run, offline=lambda a: a.dry_run)


def _nonneg(text: str) -> int:
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return v


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return v


def flags_of(args: argparse.Namespace) -> SubmitFlags:
    names = SubmitFlags.__dataclass_fields__
    return SubmitFlags(**{k: getattr(args, k) for k in names if k != "labels"}, labels=args.label)


async def run(args: argparse.Namespace, client: Client | None, defaults: Defaults) -> int:
    flags = flags_of(args)
    try:
        obj = build_workload(flags, defaults)
    except CliError as e:
        # the first run at a terminal: ask for user and queue, write the user file, try again
        if not e.message.startswith("no user") or str(args.file) in STDIN_NAMES or config.first_run() is None:
            raise
        obj = build_workload(flags, config.resolve(args.workload_dir))
    if args.dry_run:
        if args.output == "json":
            print(json.dumps(obj, indent=2))
        else:
            sys.stdout.write(dump_yaml(obj))
        return 0
    assert client is not None
    kind, meta = obj["kind"], obj["metadata"]
    what = f"{kind} {meta.get('name') or meta.get('generateName')!r} in namespace {meta['namespace']!r}"
    try:
        created = await client.create(KINDS[kind], obj)
    except ApiError as e:
        raise explain(e, client, what=what) from None
    name = created["metadata"]["name"]
    print(inert(f"{kind.lower()}/{name} created in namespace {meta['namespace']}"))
    if not args.wait:
        return 0
    return await follow(client, kind, meta["namespace"], name, until=args.until, timeout=args.timeout)
