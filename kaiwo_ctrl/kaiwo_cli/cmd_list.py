"""``kaiwo list``: KaiwoJobs and KaiwoServices as a table, or as JSON/YAML."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.workloads.base.labels import LABEL_QUEUE_NAME, LABEL_USER
from kaiwo_ctrl.workloads.base.naming import rfc1123_normalize

from .config import Defaults
from .kube import KINDS
from .output import age, dump_yaml, human_duration, status_text, table

EXAMPLES = """examples:
  kaiwo list                          # my workloads in my namespace
  kaiwo list -A --all-users           # everything, everywhere
  kaiwo list --status RUNNING,PENDING
  kaiwo list --user bob@example.com -o wide
  kaiwo list -o json | jq '.items[].metadata.name'
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "list", aliases=["ls"], parents=[common], help="list KaiwoJobs and KaiwoServices",
        description="List KaiwoJobs and KaiwoServices: name, kind, status, queue, GPUs, age and run time.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-n", "--namespace", help="namespace (default: from kaiwoconfig.yaml, else 'default')")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="list in every namespace")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--user", help="only this user's workloads (default: you, from kaiwoconfig.yaml)")
    who.add_argument("--all-users", action="store_true", help="workloads of every user")
    p.add_argument("--status", help="only these statuses, comma-separated (e.g. RUNNING,PENDING)")
    p.add_argument("--kind", choices=("job", "service"), help="only KaiwoJobs or only KaiwoServices")
    p.add_argument("-o", "--output", choices=("wide", "json", "yaml"), help="output format (default: a table)")
    p.set_defaults(run=run)


def gpus_of(spec: dict[str, Any]) -> int:
    if spec.get("gpusPerReplica"):
        return int(spec["gpusPerReplica"]) * int(spec.get("replicas") or 1)
    return int(spec.get("gpus") or 0)


def user_matches(obj: dict[str, Any], user: str) -> bool:
    """The same sanitised user as the operator's label (so case and symbols do not matter)."""
    want = rfc1123_normalize(user)
    labels = obj["metadata"].get("labels") or {}
    return rfc1123_normalize((obj.get("spec") or {}).get("user")) == want or labels.get(LABEL_USER) == want


def select(items: list[dict[str, Any]], user: str | None, statuses: set[str] | None) -> list[dict[str, Any]]:
    out = [o for o in items if user is None or user_matches(o, user)]
    if statuses:
        out = [o for o in out if ((o.get("status") or {}).get("status") or "NEW").upper() in statuses]
    return sorted(out, key=lambda o: (o["metadata"].get("creationTimestamp") or "", o["metadata"]["name"]))


def rows(items: list[dict[str, Any]], wide: bool, all_ns: bool) -> tuple[list[str], list[list[Any]]]:
    headers = ["name", "kind", "status", "queue", "gpus", "age", "duration"]
    if wide:
        headers += ["user", "replicas", "image", "started"]
    if all_ns:
        headers = ["namespace"] + headers
    out = []
    for o in items:
        meta, spec, st = o["metadata"], o.get("spec") or {}, o.get("status") or {}
        queue = spec.get("clusterQueue") or (meta.get("labels") or {}).get(LABEL_QUEUE_NAME) or "(default)"
        dur = st.get("duration")
        row = [meta["name"], o["kind"], status_text(st.get("status")), queue, gpus_of(spec),
               age(meta.get("creationTimestamp")), human_duration(dur) if dur is not None else "-"]
        if wide:
            row += [spec.get("user") or "-", spec.get("replicas") or 1, spec.get("image") or "-",
                    st.get("startTime") or "-"]
        if all_ns:
            row = [meta["namespace"]] + row
        out.append(row)
    return headers, out


async def fetch(client: Client, namespace: str | None, kinds: list[str] | None = None) -> list[dict[str, Any]]:
    """Every KaiwoJob and KaiwoService (or only ``kinds``) in ``namespace`` (None: all), kind set on each."""
    items: list[dict[str, Any]] = []
    for kind in kinds or list(KINDS):
        found, _ = await client.list_all(KINDS[kind], namespace)
        for o in found:
            o.setdefault("kind", kind)
            o.setdefault("apiVersion", KINDS[kind].api_version)
        items += found
    return items


async def run(args: argparse.Namespace, client: Client, defaults: Defaults) -> int:
    namespace = None if args.all_namespaces else (args.namespace or defaults.namespace)
    user = None if args.all_users else (args.user or defaults.user)
    if user is None and not args.all_users:
        print("kaiwo: note: no user configured (--user or kaiwoconfig.yaml); listing every user's workloads",
              file=sys.stderr)
    kinds = {"job": ["KaiwoJob"], "service": ["KaiwoService"]}.get(args.kind or "", list(KINDS))
    items = await fetch(client, namespace, kinds)
    statuses = {s.strip().upper() for s in args.status.split(",") if s.strip()} if args.status else None
    items = select(items, user, statuses)
    if args.output in ("json", "yaml"):
        doc = {"apiVersion": "v1", "kind": "List", "items": items}
        print(json.dumps(doc, indent=2) if args.output == "json" else dump_yaml(doc), end="\n" if args.output == "json" else "")
        return 0
    if not items:
        where = "any namespace" if namespace is None else f"namespace {namespace!r}"
        print(f"No workloads found in {where}" + (f" for user {user}" if user else "") + ".", file=sys.stderr)
        return 0
    headers, body = rows(items, args.output == "wide", namespace is None)
    print(table(headers, body))
    return 0
