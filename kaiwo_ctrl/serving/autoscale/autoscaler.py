"""The autoscaler loop (a leader runnable); the design is in the package docstring."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.net.fetch import Fetcher
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS
from kaiwo_ctrl.serving.autoscale.peers import scrape_active
from kaiwo_ctrl.serving.proxy.scale import set_replicas
from kaiwo_ctrl.serving.autoscale.window import ModelScaling, Window, decide, target_replicas, window_size

log = logging.getLogger("kaiwo_ctrl.serving.autoscale")

STATE_KEY = "models"


@dataclass
class AutoscalerConfig:
    interval: float = 10.0
    time_window: float = 600.0
    state_configmap: str = "kaiwo-autoscaler-state"
    #: the proxy replicas run with --metrics-secure: scrape over TLS with this Pod's token
    secure_peers: bool = False
    #: CA that the replicas' metrics certificates must verify against (secure_peers); without it no token is sent
    peer_ca_file: str = ""
    #: name the replicas' certificates must carry ("" = chain only)
    peer_server_name: str = ""
    namespace: str = "kaiwo-system"


class Autoscaler:
    def __init__(
        self, client: Client, models: Informer, peers: Callable[[], list[str]], config: AutoscalerConfig,
        engine_load: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self.client, self.models, self.peers, self.config = client, models, peers, config
        #: running + waiting requests per ``<namespace>/<name>`` where the engines reported (the scraper's)
        self.engine_load = engine_load
        self.size = window_size(config.time_window, config.interval)
        self.state: dict[str, ModelScaling] = {}
        self.ticks = 0
        self._last_warning = -1e9
        self._cm_exists = False

    # ------------------------------------------------------------- state
    async def load(self) -> None:
        cm = await self.client.get_or_none(CONFIGMAPS, self.config.state_configmap, self.config.namespace)
        self._cm_exists = cm is not None
        if cm is None:
            return  # created by the first save: an idle operator writes nothing
        try:
            saved = orjson.loads((cm.get("data") or {}).get(STATE_KEY) or "{}").get("models") or {}
        except (orjson.JSONDecodeError, AttributeError):
            log.warning("autoscaler state unreadable; starting from zero", extra={"configmap": self.config.state_configmap})
            saved = {}
        for key, entry in saved.items():
            if not isinstance(entry, Mapping):
                continue
            samples = entry.get("window")
            w = Window(self.size, float(entry.get("averageActiveRequests") or 0.0), samples if isinstance(samples, list) else None)
            if key not in self.state:  # windows built before the state could be read stay
                self.state[key] = ModelScaling(w, int(entry.get("scaleDownTicks") or 0), list(w.samples))

    async def save(self) -> None:
        changed = any(list(s.window.samples) != s.saved for s in self.state.values())
        if not changed:
            return
        models = {
            k: {"averageActiveRequests": round(s.window.mean(), 3), "window": [round(x, 3) for x in s.window.samples],
                "scaleDownTicks": s.down_ticks}
            for k, s in sorted(self.state.items())
        }
        doc = {"models": models, "lastCalculationTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        data = {STATE_KEY: orjson.dumps(doc).decode()}
        if not self._cm_exists:
            body = {"metadata": {"name": self.config.state_configmap, "namespace": self.config.namespace}, "data": data}
            try:
                await self.client.create(CONFIGMAPS, body, self.config.namespace)
                self._cm_exists = True
            except ApiError as e:
                if not e.already_exists:
                    raise
                self._cm_exists = True
                await self.client.patch(CONFIGMAPS, self.config.state_configmap, {"data": data}, self.config.namespace)
        else:
            await self.client.patch(CONFIGMAPS, self.config.state_configmap, {"data": data}, self.config.namespace)
        for s in self.state.values():
            s.saved = list(s.window.samples)

    # -------------------------------------------------------------- loop
    async def run(self) -> None:
        """Tick until cancelled; API and scrape failures are logged and retried, never fatal.

        Until the state ConfigMap can be read (e.g. its namespace does not exist
        yet) the autoscaler still scales, from in-memory windows, and saves nothing.
        """
        loaded = False
        async with Fetcher() as http:  # plain-HTTP scrapes of the proxy replicas
            while True:
                await asyncio.sleep(self.config.interval)
                try:
                    if not loaded:
                        await self.load()
                        loaded = True
                    await self.tick(http, save=True)
                except Exception as e:  # noqa: BLE001 - the autoscaler must outlive any one failure
                    self._warn("autoscaler state not readable or writable; retrying" if not loaded else "autoscaler tick failed", e)
                    if not loaded:
                        await self._tick_quietly(http)

    async def _tick_quietly(self, http: Fetcher) -> None:
        try:
            await self.tick(http, save=False)
        except Exception as e:  # noqa: BLE001
            self._warn("autoscaler tick failed", e)

    def _warn(self, msg: str, e: Exception) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._last_warning > 60:  # bounded: one warning a minute
            self._last_warning = now
            log.warning(msg, extra={"error": str(e)[:300], "configmap": f"{self.config.namespace}/{self.config.state_configmap}"})

    async def tick(self, http: Fetcher, save: bool = True) -> None:
        active = await self._load(http)
        if active is None:
            return
        self.ticks += 1
        seen = set()
        for model in self.models.list():
            meta, spec = model["metadata"], model.get("spec") or {}
            key = f"{meta['namespace']}/{meta['name']}"
            seen.add(key)
            if spec.get("autoscalingDisabled"):
                continue
            st = self.state.get(key)
            if st is None:
                w = Window(self.size)
                st = self.state[key] = ModelScaling(w, saved=list(w.samples))  # all zeros: nothing to save yet
            st.window.push(active.get(key, 0.0))
            await self._scale(meta, spec, st)
        for gone in set(self.state) - seen:
            del self.state[gone]
        if save:
            await self.save()

    async def _load(self, http: Fetcher) -> dict[str, float] | None:
        """Load per Model: the proxies' active requests, raised to the engines' where they reported.

        None (skip the tick) when a proxy replica could not be read, or there is
        neither a proxy replica nor engine load to go by.
        """
        peers = self.peers()
        engines = self.engine_load() if self.engine_load is not None else {}
        if not peers and not engines:
            return None
        active: dict[str, float] = {}
        if peers:
            scraped = await scrape_active(http, peers, secure=self.config.secure_peers, ca_file=self.config.peer_ca_file,
                                          server_name=self.config.peer_server_name)
            if scraped is None:
                log.info("autoscaler skipped a tick: a proxy replica could not be scraped (with --metrics-secure, peers are "
                         "scraped only with --autoscaler-peer-ca-file)", extra={"peers": peers})
                return None
            active = scraped
        for key, load in engines.items():
            active[key] = max(active.get(key, 0.0), load)
        return active

    async def _scale(self, meta: Mapping[str, Any], spec: Mapping[str, Any], st: ModelScaling) -> None:
        current = int(spec.get("replicas") or 0)
        target = target_replicas(st.window.mean(), int(spec.get("targetRequests") or 100),
                                 int(spec.get("minReplicas") or 0), spec.get("maxReplicas"))
        required = math.ceil(float(spec.get("scaleDownDelaySeconds", 30)) / self.config.interval)
        replicas, st.down_ticks = decide(current, target, st.down_ticks, required)
        if replicas is None:
            return
        log.info("autoscaling", extra={"model": f"{meta['namespace']}/{meta['name']}", "from": current, "to": replicas,
                                       "average": round(st.window.mean(), 2)})
        await set_replicas(self.client, meta["namespace"], meta["name"], replicas)
