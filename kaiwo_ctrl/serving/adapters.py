"""LoRA adapters (VLLM only): loaded and unloaded live, without restarting Pods.

Each server Pod of a Model with ``spec.adapters`` has a ``loader`` sidecar
running ``kaiwo-ctrl adapter-loader``: a small HTTP server that downloads an
adapter into ``/adapters/<name>`` (``POST /load``) or removes it
(``POST /unload``). KubeAI execs into the sidecar instead; an HTTP endpoint
needs no ``pods/exec`` RBAC, and the operator never runs commands in user
Pods.

After the Pod plan, for every kept vLLM Pod whose loader is Ready, the
controller:

* ensures each spec adapter whose label ``adapter.kubeai.org/<name>`` is
  missing or holds another URL hash: sidecar ``/load``, then vLLM
  ``/v1/load_lora_adapter`` (a 400 "already loaded" is success), then the
  label (FNV-1a 32-bit hash of the URL, base 36);
* removes each labelled adapter no longer in the spec: vLLM
  ``/v1/unload_lora_adapter`` (a 400 "not found" is success), sidecar
  ``/unload``, then the label.

The proxy routes adapter requests only to Pods with the label.
"""

from __future__ import annotations

import logging
from typing import Any

from kaiwo_ctrl.runtime.control.expectations import Expectations
from kaiwo_ctrl.runtime.net.fetch import FETCH_ERRORS, Fetcher
from kaiwo_ctrl.runtime.objects.objpath import key, rv
from kaiwo_ctrl.runtime.api.resources import PODS

from .pods import ADAPTER_DIR, ADAPTER_LABEL_PREFIX, ADAPTER_LOADER_PORT, ANNOTATION_PORT

log = logging.getLogger("kaiwo_ctrl.serving.adapters")

ANNOTATION_LOADER_PORT = "adapter-loader-port"
TIMEOUT = 10.0  # seconds
LOAD_TIMEOUT = 3600.0  # the sidecar downloads the adapter
#: Largest answer read from a loader or a vLLM server (only its first 300 characters are ever used).
MAX_ANSWER = 64 << 10


class AdapterError(RuntimeError):
    pass


#: What a failed sync may raise: the answer of a server, or the connection.
SYNC_ERRORS = (AdapterError, *FETCH_ERRORS)


def url_hash(url: str) -> str:
    h = 0x811C9DC5
    for b in url.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        h, r = divmod(h, 36)
        out = digits[r] + out
        if h == 0:
            return out


def adapter_changes(pod: dict[str, Any], adapters: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """(adapters to load, adapter names to unload) for one Pod."""
    labels = pod["metadata"].get("labels") or {}
    ensure = [a for a in adapters if labels.get(ADAPTER_LABEL_PREFIX + a["name"]) != url_hash(a.get("url") or "")]
    wanted = {a["name"] for a in adapters}
    remove = [k[len(ADAPTER_LABEL_PREFIX):] for k in labels if k.startswith(ADAPTER_LABEL_PREFIX) and k[len(ADAPTER_LABEL_PREFIX):] not in wanted]
    return ensure, sorted(remove)


def loader_ready(pod: dict[str, Any]) -> bool:
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == "loader":
            return bool(cs.get("ready"))
    return False


async def _post(http: Fetcher, url: str, body: dict, ok_400: str, timeout: float) -> None:
    answer = await http.post(url, json=body, timeout=timeout, max_bytes=MAX_ANSWER)
    text = answer.text()[:300]
    if answer.status < 300 or (answer.status == 400 and ok_400 and ok_400 in text.lower()):
        return
    raise AdapterError(f"POST {url}: {answer.status} {text}")


class AdapterSync:
    """Loads and unloads a Model's adapters on its vLLM Pods and records them in
    the Pods' labels. ``expectations`` (the manager's, shared with every writer)
    answers a Pod's label write until the cache shows it, so a reconcile that
    runs in between does not load the same adapters again."""

    def __init__(self, client: Any, expectations: Expectations | None = None) -> None:
        self.client = client
        self.expectations = expectations if expectations is not None else Expectations()
        #: the Pods' vLLM servers and loader sidecars (tenants' Pods: every call is bounded)
        self.http = Fetcher()

    async def sync(self, model: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        """Bring every vLLM Pod's adapters in line; False if a loader was not Ready yet."""
        adapters = (model.get("spec") or {}).get("adapters") or []
        for cached in pods:
            pod = self.expectations.view(key("Pod", cached), cached) or cached
            labels = pod["metadata"].get("labels") or {}
            if labels.get("app.kubernetes.io/name") != "vllm" or pod["metadata"].get("deletionTimestamp"):
                continue
            ensure, remove = adapter_changes(pod, adapters)
            if not ensure and not remove:
                continue
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or not loader_ready(pod):
                return False  # resumes on the Pod's next event
            await self._sync_pod(pod, ip, ensure, remove)
        return True

    async def _sync_pod(self, pod: dict[str, Any], ip: str, ensure: list[dict], remove: list[str]) -> None:
        ann = pod["metadata"].get("annotations") or {}
        server = f"http://{ip}:{ann.get(ANNOTATION_PORT, '8000')}"
        loader = f"http://{ip}:{ann.get(ANNOTATION_LOADER_PORT, str(ADAPTER_LOADER_PORT))}"
        s = self.http
        patch: dict[str, str | None] = {}
        for a in ensure:
            name, path = a["name"], f"{ADAPTER_DIR}/{a['name']}"
            await _post(s, f"{loader}/load", {"name": name, "url": a.get("url") or ""}, "", LOAD_TIMEOUT)
            await _post(s, f"{server}/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}, "already", TIMEOUT)
            patch[ADAPTER_LABEL_PREFIX + name] = url_hash(a.get("url") or "")
        for name in remove:
            await _post(s, f"{server}/v1/unload_lora_adapter", {"lora_name": name}, "not", TIMEOUT)
            await _post(s, f"{loader}/unload", {"name": name}, "", TIMEOUT)
            patch[ADAPTER_LABEL_PREFIX + name] = None
        meta = pod["metadata"]
        written = await self.client.patch(PODS, meta["name"], {"metadata": {"labels": patch}}, meta.get("namespace"))
        if written:
            self.expectations.wrote(key("Pod", pod), rv(pod), written)
        log.info("adapters synced", extra={"pod": meta["name"], "loaded": [a["name"] for a in ensure], "unloaded": remove})

    async def close(self) -> None:
        await self.http.close()
