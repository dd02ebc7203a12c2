"""Command-line wiring of the proxy and the autoscaler.

``kaiwo-ctrl run`` serves the proxy next to the controllers (and runs the
autoscaler while leader); ``kaiwo-ctrl proxy`` serves only the proxy, to scale
it out separately. Every option has an environment variable default.
This wiring lives above ``proxy/`` and ``autoscale/`` (the autoscaler uses the
proxy's metrics and scale helpers), so neither package imports the other's wiring.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from typing import Any

from api.meta import parse_duration
from kaiwo_ctrl.runtime.manager import Manager
from kaiwo_ctrl.settings import operator_namespace
from kaiwo_ctrl.serving.proxy.scrape import ScrapeConfig, attach_scraper
from kaiwo_ctrl.serving.proxy.server import ProxyServer, setup_proxy

log = logging.getLogger("kaiwo_ctrl.serving.proxy")

DEFAULT_PEER_SELECTOR = "app.kubernetes.io/name=kaiwo-ctrl"


def _seconds(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_proxy_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument("--proxy-bind-address", default=env("PROXY_BIND_ADDRESS", ":8000"),
                   help="address of the OpenAI-compatible proxy (default :8000); '0' disables it")
    p.add_argument("--proxy-request-timeout", type=_seconds, default=_seconds(env("PROXY_REQUEST_TIMEOUT", "0")),
                   help="default request deadline, e.g. 10m ('0': none); a Model's annotation "
                        "kaiwo.silogen.ai/request-timeout overrides it")
    p.add_argument("--proxy-engine-metrics-interval", type=_seconds, default=_seconds(env("PROXY_ENGINE_METRICS_INTERVAL", "1s")),
                   help="how often each Ready server Pod's /metrics is read for engine-aware routing and "
                        "autoscaling (default 1s; '0' turns it off: KubeAI's proxy-count routing)")
    p.add_argument("--proxy-engine-metrics-timeout", type=_seconds, default=_seconds(env("PROXY_ENGINE_METRICS_TIMEOUT", "500ms")),
                   help="bound on one engine metrics read, connect included (default 500ms)")
    p.add_argument("--proxy-engine-metrics-max-bytes", type=int, default=int(env("PROXY_ENGINE_METRICS_MAX_BYTES", str(4 << 20))),
                   help="largest engine metrics answer read; a longer one counts as an error (default 4 MiB)")


def add_autoscaler_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    # Unset flags fall back to the model config's modelAutoscaling keys (interval 10s,
    # timeWindow 10m, stateConfigMapName kaiwo-autoscaler-state by default).
    interval, window = env("MODEL_AUTOSCALING_INTERVAL"), env("MODEL_AUTOSCALING_TIME_WINDOW")
    p.add_argument("--autoscaler-interval", type=_seconds, default=_seconds(interval) if interval else None,
                   help="autoscaler tick (default: modelAutoscaling.interval of --model-config, 10s)")
    p.add_argument("--autoscaler-time-window", type=_seconds, default=_seconds(window) if window else None,
                   help="window the active requests are averaged over (default: modelAutoscaling.timeWindow, 10m)")
    p.add_argument("--autoscaler-state-configmap", default=env("MODEL_AUTOSCALING_STATE_CONFIGMAP"),
                   help="ConfigMap in the operator's namespace holding the autoscaler state "
                        "(default: modelAutoscaling.stateConfigMapName, kaiwo-autoscaler-state)")
    p.add_argument("--autoscaler-peers", default=env("MODEL_AUTOSCALING_PEERS", ""),
                   help="comma-separated host:port metrics addresses of the proxy replicas (default: discover Pods)")
    p.add_argument("--autoscaler-peer-selector", default=env("MODEL_AUTOSCALING_PEER_SELECTOR", DEFAULT_PEER_SELECTOR),
                   help="label selector of the proxy replica Pods in the operator's namespace")
    p.add_argument("--autoscaler-peer-metrics-port", type=int, default=int(env("MODEL_AUTOSCALING_PEER_METRICS_PORT", "8080")))


def setup_serving(mgr: Manager, args: argparse.Namespace, *, autoscaler: bool, model_config: Any = None) -> ProxyServer | None:
    """The proxy (unless disabled) and, with ``autoscaler``, the leader-only autoscaler.

    ``model_config`` (a serving ``SystemConfig``) supplies the autoscaler settings the
    flags leave unset.
    """
    server = setup_proxy(mgr, args.proxy_bind_address, default_timeout=args.proxy_request_timeout or None)
    scraper = None
    if server is not None:
        scraper = attach_scraper(server.handler.tracker, mgr.metrics.registry, ScrapeConfig(
            interval=args.proxy_engine_metrics_interval, timeout=args.proxy_engine_metrics_timeout,
            max_bytes=args.proxy_engine_metrics_max_bytes))
    if autoscaler:
        from kaiwo_ctrl.serving.autoscale.autoscaler import AutoscalerConfig
        from kaiwo_ctrl.serving.autoscale.setup import setup_autoscaler

        cfg = AutoscalerConfig(
            interval=args.autoscaler_interval or getattr(model_config, "autoscaling_interval", 10.0),
            time_window=args.autoscaler_time_window or getattr(model_config, "autoscaling_time_window", 600.0),
            state_configmap=args.autoscaler_state_configmap
            or getattr(model_config, "autoscaling_state_configmap", "")
            or "kaiwo-autoscaler-state",
            secure_peers=bool(getattr(args, "metrics_secure", False)),
            namespace=operator_namespace(getattr(args, "leader_election_namespace", None)),
        )
        peers = [p.strip() for p in args.autoscaler_peers.split(",") if p.strip()]
        setup_autoscaler(mgr, cfg, peers=peers, peer_selector=args.autoscaler_peer_selector, peer_port=args.autoscaler_peer_metrics_port,
                         self_proxy=server is not None, engine_load=scraper.model_loads if scraper else None)
    return server


async def run_with_manager(mgr: Manager, server: ProxyServer | None, stop: asyncio.Event) -> None:
    """Run the manager, and the proxy (in every replica) once the caches have synced."""

    async def serve() -> None:
        await mgr.ready.wait()
        # the engine scraper (and any other work on the proxy's endpoints) lives as long as the proxy
        background = [asyncio.create_task(fn()) for fn in server.handler.tracker.background]  # type: ignore[union-attr]
        try:
            await server.run()  # type: ignore[union-attr]
        finally:
            for t in background:
                t.cancel()

    def failed(t: asyncio.Task) -> None:
        if not t.cancelled() and t.exception() is not None:
            log.error("proxy failed, stopping", extra={"error": repr(t.exception())[:300]})
            stop.set()

    task = asyncio.create_task(serve(), name="proxy") if server is not None else None
    if task is not None:
        task.add_done_callback(failed)

    async def stop_proxy_first() -> None:
        await stop.wait()
        if task is not None:
            task.cancel()  # stop taking requests while the manager shuts down

    stopper = asyncio.create_task(stop_proxy_first())
    try:
        await mgr.run(stop)
    finally:
        stopper.cancel()
        if task is not None:
            if not stop.is_set():
                task.cancel()
            # a stopped proxy drains its requests first (ProxyServer.drain_timeout)
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError, Exception):
                await asyncio.wait_for(task, server.drain_timeout + 5)  # type: ignore[union-attr]
