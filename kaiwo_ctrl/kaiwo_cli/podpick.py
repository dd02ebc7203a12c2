"""Which pod and container of a workload ``exec`` and ``port-forward`` reach."""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.runtime.api.client import Client

from .children import workload_pods
from .errors import NOT_FOUND, NOT_RUNNING, CliError
from .kube import find_workload

#: The annotation kubectl reads for a pod's default container.
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"


async def target_pod(client: Client, namespace: str, name: str, pod_name: str | None) -> tuple[str, dict[str, Any]]:
    """(``kind/name`` of the workload, its running pod: ``pod_name``, else the first one running)."""
    obj = await find_workload(client, namespace, name)
    label = f"{obj['kind'].lower()}/{obj['metadata']['name']}"
    pods = await workload_pods(client, obj)
    if pod_name:
        pods = [p for p in pods if p["metadata"]["name"] == pod_name]
        if not pods:
            raise CliError(f"{label} has no pod named {pod_name!r} (`kaiwo status {name}` lists its pods)", NOT_FOUND)
    if not pods:
        status = (obj.get("status") or {}).get("status") or "NEW"
        raise CliError(f"{label} has no pods yet (status {status}); `kaiwo status {name}` shows why", NOT_RUNNING)
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if not running:
        p = pods[0]
        phase = (p.get("status") or {}).get("phase") or "Pending"
        raise CliError(f"pod {p['metadata']['name']} of {label} is {phase}, not Running: nothing to reach in it yet",
                       NOT_RUNNING)
    return label, running[0]


def pick_container(pod: dict[str, Any], wanted: str | None) -> str:
    """``wanted`` if the pod has it; else the pod's default container (its annotation, else the first)."""
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    if wanted:
        if wanted not in names:
            raise CliError(f"pod {pod['metadata']['name']} has no container {wanted!r} "
                           f"(containers: {', '.join(names) or 'none'})", NOT_FOUND)
        return wanted
    default = str((pod["metadata"].get("annotations") or {}).get(DEFAULT_CONTAINER))
    return default if default in names else names[0]
