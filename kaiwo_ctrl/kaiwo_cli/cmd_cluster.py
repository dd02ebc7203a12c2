"""``kaiwo status gpus|amd|nvidia|queues``: GPU capacity per node pool and quota per ClusterQueue."""

from __future__ import annotations

import argparse
from typing import Any

from kaiwo_ctrl.kinds import CLUSTERQUEUES
from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import NODES, PODS

from . import views
from .errors import NOT_FOUND, USAGE, CliError
from .kube import explain
from .output import table

#: ``kaiwo status VIEW`` names that show the cluster instead of a workload (``job/NAME`` still
#: reaches a workload of that name).
VIEWS = ("gpus", "amd", "nvidia", "queues")


async def _items(client: Client, res: Any) -> list[dict[str, Any]]:
    try:
        return (await client.list(res)).get("items") or []
    except ApiError as e:
        if e.not_found and res is CLUSTERQUEUES:
            raise CliError("Kueue's ClusterQueues are not served by this cluster (is Kueue installed?)",
                           NOT_FOUND) from None
        raise explain(e, client) from None


async def gpus(client: Client, vendor: str | None) -> tuple[str, Any]:
    # imported here: the monitoring and queues packages it reads from cost other commands' start-up
    from . import gpustats

    rows = gpustats.pool_rows(await _items(client, NODES), await _items(client, PODS))
    if vendor:
        rows = [r for r in rows if r["vendor"] == vendor]
    if not rows:
        return f"no {vendor + ' ' if vendor else ''}GPU nodes in this cluster", {"pools": []}
    text = table(["node pool", "nodes", "resource", "capacity", "allocated", "free"],
                 [[r["pool"], r["nodes"], r["resource"], r["capacity"], r["allocated"], r["free"]] for r in rows])
    total = {k: sum(r[k] for r in rows) for k in ("capacity", "allocated", "free")}
    text += f"\n\ntotal: {total['capacity']} GPUs, {total['allocated']} allocated, {total['free']} free"
    return text, {"pools": rows, "total": total}


async def queues(client: Client) -> tuple[str, Any]:
    from . import gpustats

    rows = gpustats.queue_rows(await _items(client, CLUSTERQUEUES))
    if not rows:
        return "no ClusterQueues in this cluster", {"clusterQueues": []}
    text = table(["cluster queue", "gpu quota", "gpus used", "pending", "admitted"],
                 [[r["name"], f"{r['gpuQuota']} {r['gpuResource']}" if r["gpuResource"] else "-",
                   r["gpuUsed"] if r["gpuResource"] else "-", r["pending"], r["admitted"]] for r in rows])
    return text, {"clusterQueues": rows}


async def run(view: str, args: argparse.Namespace, client: Client) -> int:
    if args.output == "yaml":
        raise CliError(f"`kaiwo status {view}` prints a table or -o json", USAGE)

    async def render() -> tuple[str, Any]:
        if view == "queues":
            return await queues(client)
        return await gpus(client, None if view == "gpus" else view)

    return await views.show(render, output=args.output, watch=args.watch, interval=args.interval)
