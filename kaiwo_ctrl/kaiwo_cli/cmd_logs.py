"""``kaiwo logs NAME``: the logs of a workload's pods, the download Job's pod included."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import orjson

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import NODES, PODS

from .children import workload_pods
from .config import Defaults
from .errors import NO_LOGS, NOT_FOUND, CliError
from .kube import explain, find_workload
from .output import paint

EXAMPLES = """examples:
  kaiwo logs my-job                     # every pod, each line prefixed with its pod
  kaiwo logs -f my-job                  # follow
  kaiwo logs my-job --tail 100 --pod my-job-x7k2p
  kaiwo logs service/my-llm --container vllm
"""
#: How long the API server may take to start answering a log request (seconds).
CONNECT_TIMEOUT = 30.0
#: The longest log line held whole; a longer one is printed in pieces of this size.
MAX_LINE = 1 << 20
#: The annotation kwok puts on the Nodes it simulates.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "logs", parents=[common], help="print or follow the logs of a workload's pods",
        description="Print the logs of every pod of a workload (the download Job's pod too), each line "
        "prefixed with the pod name, or of one pod with --pod.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("-n", "--namespace", help="namespace (default: from kaiwoconfig.yaml, else 'default')")
    p.add_argument("--pod", help="only this pod (no prefix is printed)")
    p.add_argument("-c", "--container", help="only this container (default: every container of the pod)")
    p.add_argument("-f", "--follow", action="store_true", help="keep streaming new lines")
    p.add_argument("--tail", type=int, metavar="N", help="only the last N lines of each container")
    p.set_defaults(run=run)


async def run(args: argparse.Namespace, client: Client, defaults: Defaults) -> int:
    namespace = args.namespace or defaults.namespace
    obj = await find_workload(client, namespace, args.name)
    pods = await workload_pods(client, obj)
    label = f"{obj['kind'].lower()}/{obj['metadata']['name']}"
    if args.pod:
        pods = [p for p in pods if p["metadata"]["name"] == args.pod]
        if not pods:
            raise CliError(f"{label} has no pod named {args.pod!r} (`kaiwo status {args.name}` lists its pods)", NOT_FOUND)
    if not pods:
        status = (obj.get("status") or {}).get("status") or "NEW"
        raise CliError(f"{label} has no pods yet (status {status}); `kaiwo status {args.name}` shows why", NO_LOGS)
    streams = [(p, c) for p in pods for c in containers(p, args.container)]
    if not streams:
        raise CliError(f"no container {args.container!r} in the pods of {label}", NOT_FOUND)
    prefix = not args.pod
    many = {p["metadata"]["name"]: len(containers(p, args.container)) > 1 for p in pods}

    async def one(pod: dict[str, Any], container: str) -> bool:
        name = pod["metadata"]["name"]
        tag = (f"{name}/{container}" if many[name] else name) if prefix else ""
        return await stream_pod(client, pod, container, tag, args.follow, args.tail)

    if args.follow:
        results = await asyncio.gather(*(one(p, c) for p, c in streams))
    else:
        results = [await one(p, c) for p, c in streams]
    if not any(results):
        raise CliError(f"no logs available for {label}: see the messages above", NO_LOGS)
    return 0


def containers(pod: dict[str, Any], only: str | None) -> list[str]:
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    return [n for n in names if n == only] if only else names


async def log_lines(client: Client, pod: dict[str, Any], container: str, follow: bool,
                    tail: int | None) -> AsyncIterator[str]:
    """One container's log, line by line, as the API server streams it; failures raise :class:`ApiError`."""
    meta = pod["metadata"]
    params = {"container": container, "follow": "true" if follow else None, "tailLines": tail}
    path = PODS.path(meta["namespace"], meta["name"], "log")
    target = client.transport.target(path, params)
    try:
        # "*/*": the kubelet answers plain text; no inactivity limit, as a followed log may stay quiet for hours
        async with client.transport.stream(target, CONNECT_TIMEOUT, long_lived=True, accept="*/*") as resp:
            if resp.status >= 400:
                raw = (await resp.read())[:MAX_LINE]
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    body = {"message": raw[:500].decode(errors="replace")}
                raise ApiError(resp.status, body, "GET", path)
            parts: list[bytes] = []
            size = 0
            async for chunk in resp:
                *lines, rest = chunk.split(b"\n")
                if lines:
                    lines[0] = b"".join([*parts, lines[0]])
                    parts, size = [], 0
                    for line in lines:
                        yield line.decode(errors="replace")
                if rest:
                    parts.append(rest)
                    size += len(rest)
                    if size > MAX_LINE:  # a line without end: shown in pieces, never held whole
                        yield b"".join(parts).decode(errors="replace")
                        parts, size = [], 0
            if parts:
                yield b"".join(parts).decode(errors="replace")
    except (TimeoutError, OSError) as e:
        raise ApiError.transport_failure(e, "GET", path) from None


def not_running(pod: dict[str, Any]) -> str | None:
    """Why a pod has no logs to ask for yet, or None."""
    st = pod.get("status") or {}
    if not (pod.get("spec") or {}).get("nodeName") or (st.get("phase") == "Pending" and not st.get("containerStatuses")):
        return f"pod {pod['metadata']['name']} is {st.get('phase', 'Pending')} and not running yet: no logs"
    return None


async def stream_pod(client: Client, pod: dict[str, Any], container: str, tag: str, follow: bool,
                     tail: int | None) -> bool:
    """Write one container's log to stdout; explain on stderr why there is none. True if it streamed."""
    name = pod["metadata"]["name"]
    why = not_running(pod)
    if why:
        print(f"kaiwo: {why}", file=sys.stderr)
        return False
    prefix = paint(f"[{tag}] ", "dim") if tag else ""
    try:
        async for line in log_lines(client, pod, container, follow, tail):
            sys.stdout.write(prefix + line + "\n")
            if follow:
                sys.stdout.flush()
    except ApiError as e:
        if e.status in (401, 403) or e.status == 0:
            raise explain(e, client) from None
        print(f"kaiwo: no logs from pod {name} (container {container}): {await _why(client, pod, e)}", file=sys.stderr)
        return False
    return True


async def _why(client: Client, pod: dict[str, Any], e: ApiError) -> str:
    """Why the API server could not give a log: a simulated node, a kubelet that did not answer, ..."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    node: dict[str, Any] = {}
    if node_name:
        try:
            node = await client.get(NODES, node_name)
        except ApiError:
            pass
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if KWOK_NODE_ANNOTATION in annotations:
        return (f"it runs on the simulated (kwok) node {node_name}, which has no container runtime and "
                "keeps no container logs")
    if e.status >= 500:
        return f"the kubelet of node {node_name} did not serve them ({e.message[:300]})"
    return e.message[:300] or f"{e.status} {e.reason}"
