"""LoRA adapters (VLLM only): loaded and unloaded live, without restarting Pods.

Each server Pod of a Model with ``spec.adapters`` has a ``loader`` sidecar
running ``kaiwo-ctrl adapter-loader``: a small HTTP server that downloads an
adapter into ``/adapters/<name>`` (``POST /load``) or removes it
(``POST /unload``). KubeAI execs into the sidecar instead; an HTTP endpoint
needs no ``pods/exec`` RBAC, and the operator never runs commands in user
Pods.

After the Pod plan, for every kept vLLM Pod whose loader is Ready, the
controller starts a background sync of that Pod (never inside the reconcile:
a tenant's Pod that accepts connections and never answers must not hold a
shared reconcile worker) which:

* ensures each spec adapter whose label ``adapter.kubeai.org/<name>`` is
  missing or holds another URL hash: sidecar ``/load``, then vLLM
  ``/v1/load_lora_adapter`` (a 400 "already loaded" is success), then the
  label (FNV-1a 32-bit hash of the URL, base 36);
* removes each labelled adapter no longer in the spec: vLLM
  ``/v1/unload_lora_adapter`` (a 400 "not found" is success), sidecar
  ``/unload``, then the label.

The proxy routes adapter requests only to Pods with the label.

Bulkheads (:class:`AdapterLimits`, flags of ``kaiwo-ctrl run``): every call to a
Pod has a short timeout (``--adapter-call-timeout``); at most
``--adapter-calls-per-namespace`` calls run at once per namespace, so one
namespace's stalled Pods delay only that namespace's loads. The sidecar's
download may take long, so ``/load`` answers at once (202 while it downloads)
and is polled until done, without a slot held between polls. A finished or
failed sync enqueues the Model; a failed Pod is retried with a backoff, and the
Model's ``AdaptersLoaded`` condition names the adapter and the error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kaiwo_ctrl.runtime.control.expectations import Expectations
from kaiwo_ctrl.runtime.net.fetch import FETCH_ERRORS, Fetcher
from kaiwo_ctrl.runtime.objects.objpath import key, rv
from kaiwo_ctrl.runtime.api.resources import PODS

from kaiwo_ctrl.serving.podcontract import ADAPTER_LABEL_PREFIX, ANNOTATION_PORT
from kaiwo_ctrl.serving.model.pods import ADAPTER_DIR, ADAPTER_LOADER_PORT

log = logging.getLogger("kaiwo_ctrl.serving.model.adapters")

ANNOTATION_LOADER_PORT = "adapter-loader-port"
#: Largest answer read from a loader or a vLLM server (only its first 300 characters are ever used).
MAX_ANSWER = 64 << 10


class AdapterError(RuntimeError):
    pass


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


@dataclass(frozen=True)
class AdapterLimits:
    #: seconds one call to a Pod (vLLM or the loader sidecar) may take
    call_timeout: float = 10.0
    #: calls to Pods of one namespace in flight at once
    per_namespace: int = 2
    #: seconds a sidecar download may take in all (polled, each poll one short call)
    download_deadline: float = 3600.0
    poll_interval: float = 2.0
    #: first and largest seconds before a failed Pod is synced again
    retry_base: float = 10.0
    retry_max: float = 300.0


@dataclass
class AdapterState:
    """What the Model's status says of its adapters (see :meth:`AdapterSync.sync`)."""

    wanted: bool = False  # the Model lists adapters or a Pod still carries one
    loading: list[str] = field(default_factory=list)  # "<adapter> on <pod>"
    failed: list[str] = field(default_factory=list)  # "adapter <name> on <pod>: <error>"
    waiting: int = 0  # Pods whose loader is not Ready yet
    retry_after: float | None = None  # seconds to the next retry of a failed Pod


@dataclass
class _PodSync:
    task: asyncio.Task | None = None
    what: list[str] = field(default_factory=list)
    error: str | None = None
    attempts: int = 0
    retry_at: float = 0.0


def new_failures(model: dict[str, Any], failed: list[str]) -> list[str]:
    """The failures the Model's ``AdaptersLoaded`` condition does not report yet (one event each)."""
    old: dict[str, Any] = next(
        (c for c in (model.get("status") or {}).get("conditions") or () if c.get("type") == "AdaptersLoaded"), {})
    return [m for m in failed if m not in str(old.get("message") or "")]


class AdapterSync:
    """Loads and unloads a Model's adapters on its vLLM Pods, off the reconcile
    path, and records them in the Pods' labels. ``expectations`` (the manager's,
    shared with every writer) answers a Pod's label write until the cache shows
    it, so a reconcile that runs in between does not load the same adapters
    again. ``on_done(namespace, model)`` is called when a Pod's sync ends."""

    def __init__(self, client: Any, expectations: Expectations | None = None, limits: AdapterLimits | None = None,
                 on_done: Callable[[str, str], None] | None = None) -> None:
        self.client = client
        self.expectations = expectations if expectations is not None else Expectations()
        self.limits = limits or AdapterLimits()
        self.on_done = on_done or (lambda _ns, _name: None)
        #: the Pods' vLLM servers and loader sidecars (tenants' Pods: every call is bounded)
        self.http = Fetcher()
        self._pods: dict[tuple[str, str], dict[str, _PodSync]] = {}  # (ns, model) -> Pod uid -> its sync
        self._slots: dict[str, asyncio.Semaphore] = {}

    def sync(self, model: dict[str, Any], pods: list[dict[str, Any]]) -> AdapterState:
        """Start a background sync for every vLLM Pod whose adapters differ from
        the spec (never waits on a Pod); the state of them all."""
        meta = model["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        adapters = (model.get("spec") or {}).get("adapters") or []
        state = AdapterState(wanted=bool(adapters))
        syncs = self._pods.setdefault((ns, name), {})
        live: set[str] = set()
        now = time.monotonic()
        for cached in pods:
            pod = self.expectations.view(key("Pod", cached), cached) or cached
            labels = pod["metadata"].get("labels") or {}
            if labels.get("app.kubernetes.io/name") != "vllm" or pod["metadata"].get("deletionTimestamp"):
                continue
            uid = pod["metadata"].get("uid") or pod["metadata"]["name"]
            live.add(uid)
            s = syncs.setdefault(uid, _PodSync())
            if s.task is not None:  # a retry still shows the last failure (no flapping condition)
                state.wanted = True
                state.failed += [s.error] if s.error else []
                state.loading += [] if s.error else s.what
                continue
            ensure, remove = adapter_changes(pod, adapters)
            if not ensure and not remove:
                s.error, s.attempts = None, 0
                continue
            state.wanted = True
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or not loader_ready(pod):
                state.waiting += 1  # resumes on the Pod's next event
                continue
            if s.error and now < s.retry_at:
                state.failed.append(s.error)
                wait = s.retry_at - now
                state.retry_after = wait if state.retry_after is None else min(state.retry_after, wait)
                continue
            s.what = [f"{a['name']} on {pod['metadata']['name']}" for a in ensure]
            s.what += [f"{n} (unload) on {pod['metadata']['name']}" for n in remove]
            s.task = asyncio.create_task(self._run(ns, name, s, pod, ip, ensure, remove), name=f"adapters {ns}/{name}")
            state.loading += s.what
        for uid in set(syncs) - live:  # Pods gone: their syncs end
            if (t := syncs.pop(uid).task) is not None:
                t.cancel()
        return state

    def forget(self, ns: str, name: str) -> None:
        """The Model is gone or going: stop its syncs."""
        for s in self._pods.pop((ns, name), {}).values():
            if s.task is not None:
                s.task.cancel()
        if not any(k[0] == ns for k in self._pods):
            self._slots.pop(ns, None)

    async def _run(self, ns: str, name: str, s: _PodSync, pod: dict, ip: str, ensure: list[dict], remove: list[str]) -> None:
        try:
            await self._sync_pod(ns, pod, ip, ensure, remove)
            s.error, s.attempts = None, 0
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of a tenant's Pod is reported on its Model
            s.attempts += 1
            lim = self.limits
            s.retry_at = time.monotonic() + min(lim.retry_base * 2 ** (s.attempts - 1), lim.retry_max)
            s.error = str(e)[:300] or type(e).__name__
            log.warning("adapter sync failed", extra={"model": f"{ns}/{name}", "pod": pod["metadata"]["name"], "error": s.error})
        finally:
            s.task = None
        self.on_done(ns, name)

    async def _call(self, ns: str, url: str, body: dict, ok_400: str = "") -> int:
        """One POST to a Pod, holding one of the namespace's slots, within the call timeout."""
        slot = self._slots.setdefault(ns, asyncio.Semaphore(self.limits.per_namespace))
        async with slot:
            try:
                answer = await self.http.post(url, json=body, timeout=self.limits.call_timeout, max_bytes=MAX_ANSWER)
            except TimeoutError:
                raise AdapterError(f"POST {url}: no answer within {self.limits.call_timeout:g}s") from None
            except FETCH_ERRORS as e:
                raise AdapterError(f"POST {url}: {type(e).__name__}: {str(e)[:200]}") from None
        text = answer.text()[:300]
        if answer.status < 300 or (answer.status == 400 and ok_400 and ok_400 in text.lower()):
            return answer.status
        raise AdapterError(f"POST {url}: {answer.status} {text}")

    async def _download(self, ns: str, loader: str, a: dict) -> None:
        """The sidecar's download of ``a``: polled while it answers 202."""
        deadline = time.monotonic() + self.limits.download_deadline
        while await self._call(ns, f"{loader}/load", {"name": a["name"], "url": a.get("url") or ""}) == 202:
            if time.monotonic() > deadline:
                raise AdapterError(f"download not done within {self.limits.download_deadline:g}s")
            await asyncio.sleep(self.limits.poll_interval)

    async def _sync_pod(self, ns: str, pod: dict[str, Any], ip: str, ensure: list[dict], remove: list[str]) -> None:
        ann = pod["metadata"].get("annotations") or {}
        server = f"http://{ip}:{ann.get(ANNOTATION_PORT, '8000')}"
        loader = f"http://{ip}:{ann.get(ANNOTATION_LOADER_PORT, str(ADAPTER_LOADER_PORT))}"
        patch: dict[str, str | None] = {}
        try:
            for a in ensure:
                name, path = a["name"], f"{ADAPTER_DIR}/{a['name']}"
                try:
                    await self._download(ns, loader, a)
                    await self._call(ns, f"{server}/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}, "already")
                except AdapterError as e:
                    raise AdapterError(f"adapter {name} on Pod {pod['metadata']['name']}: {e}") from None
                patch[ADAPTER_LABEL_PREFIX + name] = url_hash(a.get("url") or "")
            for name in remove:
                try:
                    await self._call(ns, f"{server}/v1/unload_lora_adapter", {"lora_name": name}, "not")
                    await self._call(ns, f"{loader}/unload", {"name": name})
                except AdapterError as e:
                    raise AdapterError(f"adapter {name} (unload) on Pod {pod['metadata']['name']}: {e}") from None
                patch[ADAPTER_LABEL_PREFIX + name] = None
        finally:
            if patch:  # what was done before a failure is recorded too
                await self._label(pod, patch)
        log.info("adapters synced", extra={"pod": pod["metadata"]["name"], "loaded": [a["name"] for a in ensure], "unloaded": remove})

    async def _label(self, pod: dict[str, Any], patch: dict[str, str | None]) -> None:
        meta = pod["metadata"]
        written = await self.client.patch(PODS, meta["name"], {"metadata": {"labels": patch}}, meta.get("namespace"))
        if written:
            self.expectations.wrote(key("Pod", pod), rv(pod), written)

    async def close(self) -> None:
        for k in list(self._pods):
            self.forget(*k)
        await self.http.close()
