"""``kaiwo monitor NAME``: GPU utilisation of a workload's pods, from the GPU exporter."""

from __future__ import annotations

import argparse
from typing import Any

from kaiwo_ctrl.runtime.api.client import Client

from . import views
from .children import workload_pods
from .config import Defaults
from .errors import FAILED, CliError
from .kube import find_workload
from .output import table

EXAMPLES = """examples:
  kaiwo monitor my-job --metrics-endpoint http://amd-metrics-exporter.kube-amd-gpu.svc:5000/metrics
  KAIWO_METRICS_ENDPOINT=http://127.0.0.1:9400/metrics kaiwo monitor service/my-llm -w
  kaiwo monitor my-job -o json

An in-cluster endpoint (SERVICE.NAMESPACE.svc) is read through the API server's
service proxy; any other URL directly.
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "monitor", parents=[common], help="GPU utilisation of a workload's pods",
        description="GPU utilisation per pod and GPU of a workload, from the GPU metrics exporter the operator's "
        "resource monitoring reads (AMD gpu_gfx_activity, NVIDIA DCGM_FI_DEV_GPU_UTIL).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("-n", "--namespace", help="namespace (default: from kaiwoconfig.yaml, else 'default')")
    p.add_argument("--metrics-endpoint", metavar="URL",
                   help=f"the GPU exporter's /metrics URL (default: ${views.ENDPOINT_ENV})")
    views.add_view_flags(p)
    p.set_defaults(run=run)


async def run(args: argparse.Namespace, client: Client, defaults: Defaults) -> int:
    # imported here: the monitoring and queues packages it reads from cost other commands' start-up
    from . import gpustats

    namespace = args.namespace or defaults.namespace
    url = views.endpoint_of(args.metrics_endpoint)
    obj = await find_workload(client, namespace, args.name)
    label = f"{obj['kind'].lower()}/{obj['metadata']['name']}"

    async def render() -> tuple[str, Any]:
        pods = [p["metadata"]["name"] for p in await workload_pods(client, obj)]
        try:
            samples = gpustats.for_pods(gpustats.parse_utilisation(await views.scrape(client, url)), namespace, pods)
        except ValueError as e:
            raise CliError(f"the GPU metrics endpoint {url} answered text that is not Prometheus exposition: {e}",
                           FAILED) from None
        data = {"workload": label, "namespace": namespace, "pods": pods, "gpus": gpustats.monitor_json(samples)}
        if samples:
            mean = sum(s.percent for s in samples) / len(samples)
            text = table(["pod", "container", "gpu", "utilisation"], gpustats.monitor_rows(samples))
            text += f"\n\n{label}: {len(samples)} GPU(s), mean utilisation {mean:.1f}%"
        elif pods:
            text = f"{label}: the exporter reports no GPU of its pods ({', '.join(pods)})"
        else:
            text = f"{label}: no pods yet"
        return text, data

    return await views.show(render, output=args.output, watch=args.watch, interval=args.interval)
