"""``kaiwo status NAME``: status, conditions, Kueue admission, children and events."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kaiwo_ctrl.runtime.api.client import Client

from .sanitize import inert
from . import cmd_cluster
from .children import admission, child_state, event_time, events_of, family, pod_state
from .config import Defaults
from .kube import find_workload
from .output import age, dump_yaml, human_duration, paint, status_text, table

EXAMPLES = """examples:
  kaiwo status my-job
  kaiwo status service/my-llm -n ml-team
  kaiwo status my-job -o yaml        # the KaiwoJob itself
  kaiwo status gpus                  # GPU capacity, allocated and free per node pool (also: amd, nvidia)
  kaiwo status queues -w             # quota, use, pending and admitted per ClusterQueue, redrawn
  kaiwo status job/gpus              # a workload that happens to be called "gpus"
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "status", aliases=["describe"], parents=[common], help="show a workload's status, conditions and events",
        description="Show a workload's status, its conditions with their messages, the Kueue Workload's "
        "admission, the objects it created with their state, and recent events. NAME may be prefixed "
        "with job/ or service/ when both kinds share the name. NAME gpus, amd, nvidia or queues shows "
        "the cluster's GPUs per node pool or its ClusterQueues instead.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("-n", "--namespace", help="namespace (default: from kaiwoconfig.yaml, else 'default')")
    p.add_argument("-o", "--output", choices=("json", "yaml"), help="print the workload object instead")
    p.add_argument("-w", "--watch", action="store_true", help="gpus/queues: redraw every --interval seconds")
    p.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help="with --watch (default 2)")
    p.set_defaults(run=run)


def _heading(text: str) -> str:
    return paint(text, "bold")


def summary(obj: dict[str, Any]) -> list[str]:
    meta, spec, st = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    dur = st.get("duration")
    fields = [
        ("Name", meta["name"]),
        ("Namespace", meta["namespace"]),
        ("Kind", obj["kind"]),
        ("User", spec.get("user") or "-"),
        ("Queue", spec.get("clusterQueue") or "(cluster default)"),
        ("Status", status_text(st.get("status"))),
        ("Created", f"{meta.get('creationTimestamp', '-')} ({age(meta.get('creationTimestamp'))} ago)"),
        ("Started", st.get("startTime") or "-"),
        ("Duration", human_duration(dur) if dur is not None else "-"),
    ]
    if st.get("completionTime"):
        fields.insert(8, ("Completed", st["completionTime"]))
    return [f"{k + ':':<12}{inert(v)}" for k, v in fields]


async def run(args: argparse.Namespace, client: Client, defaults: Defaults) -> int:
    if args.name in cmd_cluster.VIEWS:
        return await cmd_cluster.run(args.name, args, client)
    namespace = args.namespace or defaults.namespace
    obj = await find_workload(client, namespace, args.name)
    if args.output == "json":
        print(json.dumps(obj, indent=2))
        return 0
    if args.output == "yaml":
        print(dump_yaml(obj), end="")
        return 0
    fam = await family(client, obj)
    out = summary(obj)
    conds = (obj.get("status") or {}).get("conditions") or []
    out += ["", _heading("Conditions:")]
    out.append(table(["type", "status", "reason", "message", "age"],
                     [[c.get("type"), c.get("status"), c.get("reason"), c.get("message", ""),
                       age(c.get("lastTransitionTime"))] for c in conds]) if conds else "  (none yet)")
    out += ["", _heading("Kueue workload:")]
    if fam.workloads:
        out.append(table(["name", "queue", "admitted", "cluster queue", "message"],
                         [[w["metadata"]["name"], (w.get("spec") or {}).get("queueName", "-"), *admission(w)]
                          for w in fam.workloads]))
    else:
        out.append("  (none: not queued yet, or Kueue has not seen it)")
    out += ["", _heading("Objects:")]
    rows = [[c["kind"], c["metadata"]["name"], child_state(c)] for c in fam.children]
    rows += [["Pod", p["metadata"]["name"], pod_state(p) + (f" on {p['spec']['nodeName']}" if (p.get("spec") or {}).get("nodeName") else "")]
             for p in fam.pods]
    out.append(table(["kind", "name", "state"], rows) if rows else "  (none yet)")
    events = await events_of(client, namespace, fam.uids() | {obj["metadata"]["uid"]}, fam.skipped)
    out += ["", _heading("Events:")]
    out.append(table(["age", "type", "reason", "object", "message"],
                     [[age(event_time(e)), e.get("type"), e.get("reason"),
                       f"{(e.get('involvedObject') or {}).get('kind', '').lower()}/{(e.get('involvedObject') or {}).get('name', '')}",
                       e.get("message", "")] for e in events]) if events else "  (none)")
    if fam.skipped:
        out += ["", inert(f"Not shown: {', '.join(fam.skipped)}")]
    print("\n".join(out))
    return 0
