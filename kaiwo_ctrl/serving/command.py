"""Command-line wiring of the proxy and the autoscaler.

``kaiwo-ctrl run`` serves the proxy next to the controllers (and runs the
autoscaler while leader); ``kaiwo-ctrl proxy`` serves only the proxy, to scale
it out separately. Every option has an environment variable default.
This wiring lives above ``proxy/`` and ``autoscale/`` (the autoscaler uses the
proxy's metrics and scale helpers), so neither package imports the other's wiring.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from api.meta import parse_duration
from kaiwo_ctrl.runtime.objects.quantity import parse_quantity
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.settings import operator_namespace
from kaiwo_ctrl.serving.proxy.auth import MODES as AUTH_MODES, AuthConfig
from kaiwo_ctrl.serving.limits import FairLimits, ProxyLimits
from kaiwo_ctrl.serving.routing.scrape import ScrapeConfig, attach_scraper
from kaiwo_ctrl.serving.proxy.server import ProxyServer, setup_proxy

log = logging.getLogger("kaiwo_ctrl.serving.proxy")

DEFAULT_PEER_SELECTOR = "app.kubernetes.io/name=kaiwo-ctrl"


def _seconds(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _bytes(text: str) -> int:
    try:
        n = int(parse_quantity(text))
    except (ValueError, ArithmeticError) as e:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from e
    if n <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive: {text!r}")
    return n


def _bytes_or_zero(text: str) -> int:
    return 0 if text.strip() == "0" else _bytes(text)


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"a count must be positive: {text!r}")
    return n


def _count_or_zero(text: str) -> int:
    return 0 if text.strip() == "0" else _count(text)


def _positive_seconds(text: str) -> float:
    s = _seconds(text)
    if s <= 0:
        raise argparse.ArgumentTypeError(f"a time limit must be positive: {text!r}")
    return s


#: The limits' defaults have one home, ProxyLimits; a flag's default is the
#: environment variable's value when set, else that default.
_LIMITS = ProxyLimits()


def _from_env(name: str, parse: Any, default: Any) -> Any:
    text = os.environ.get(name)
    return default if text is None else parse(text)


def add_proxy_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument("--proxy-bind-address", default=env("PROXY_BIND_ADDRESS", ":8000"),
                   help="address of the OpenAI-compatible proxy (default :8000); '0' disables it. In-cluster "
                        "clients only: never expose it through a Gateway (it serves every namespace's Models)")
    p.add_argument("--proxy-gateway-bind-address", default=env("PROXY_GATEWAY_BIND_ADDRESS", ":8001"),
                   help="address of the proxy's Gateway listener (default :8001; '0' disables it): serves only "
                        "/<namespace>/<model>/v1/... with that namespace's route token, as the AIM HTTPRoutes send it")
    p.add_argument("--proxy-request-timeout", type=_seconds, default=_seconds(env("PROXY_REQUEST_TIMEOUT", "30m")),
                   help="default overall deadline of a request, streaming included (default 30m; '0': none); "
                        "a Model's annotation kaiwo.silogen.ai/request-timeout overrides it")
    p.add_argument("--proxy-endpoint-wait-timeout", type=_positive_seconds, default=_from_env("PROXY_ENDPOINT_WAIT_TIMEOUT", _positive_seconds, _LIMITS.endpoint_wait),
                   help="how long a request waits for a Ready server Pod of its Model, e.g. while it scales from zero "
                        "(default 10m; then 504)")
    p.add_argument("--proxy-header-timeout", type=_positive_seconds, default=_from_env("PROXY_HEADER_TIMEOUT", _positive_seconds, _LIMITS.head_timeout),
                   help="time from a request's first byte to the end of its head (default 30s; then 408)")
    p.add_argument("--proxy-body-idle-timeout", type=_positive_seconds, default=_from_env("PROXY_BODY_IDLE_TIMEOUT", _positive_seconds, _LIMITS.body_idle_timeout),
                   help="longest pause between a request's body bytes (default 30s; then 408)")
    p.add_argument("--proxy-linger-timeout", type=_positive_seconds, default=_from_env("PROXY_LINGER_TIMEOUT", _positive_seconds, _LIMITS.linger_timeout),
                   help="after refusing a request (4xx, 503), how long what the client still sends is read and dropped "
                        "before the connection closes, so the answer is not lost to a reset (default 2s)")
    p.add_argument("--proxy-max-body-size", type=_bytes, default=_from_env("PROXY_MAX_BODY_SIZE", _bytes, _LIMITS.max_body_bytes),
                   help="largest request body (default 32Mi, room for a 25 MB audio upload; 413, sent before the body is read)")
    p.add_argument("--proxy-body-memory", type=_bytes, default=_from_env("PROXY_BODY_MEMORY", _bytes, _LIMITS.body_memory),
                   help="request bodies held at once, all clients together (default 512Mi); a request waits until its "
                        "body fits, and gets 503 after --proxy-body-memory-wait")
    p.add_argument("--proxy-body-memory-wait", type=_positive_seconds, default=_from_env("PROXY_BODY_MEMORY_WAIT", _positive_seconds, _LIMITS.body_memory_wait),
                   help="how long a request waits for --proxy-body-memory to fit its body (default 2m; then 503)")
    p.add_argument("--proxy-multipart-model-window", type=_bytes, default=_from_env("PROXY_MULTIPART_MODEL_WINDOW", _bytes, _LIMITS.multipart_model_window),
                   help="how far into a multipart upload its 'model' field must have ended for the rest to stream "
                        "to the model server (default 1Mi); a form with the field later is held whole under "
                        "--proxy-body-memory")
    p.add_argument("--proxy-max-header-size", type=_bytes, default=_from_env("PROXY_MAX_HEADER_SIZE", _bytes, _LIMITS.max_head_bytes),
                   help="largest request head (default 64Ki; then 431)")
    p.add_argument("--proxy-max-upstream-header-size", type=_bytes, default=_from_env("PROXY_MAX_UPSTREAM_HEADER_SIZE", _bytes, _LIMITS.max_upstream_head_bytes),
                   help="largest answer head from a model server (default 64Ki; a larger one is a 502)")
    _add_connection_arguments(p)
    _add_engine_metrics_arguments(p)
    _add_fair_arguments(p)
    _add_auth_arguments(p)


def _add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """Per-connection bounds of the proxy's listeners."""
    p.add_argument("--proxy-max-header-count", type=_count, default=_from_env("PROXY_MAX_HEADER_COUNT", _count, _LIMITS.max_headers),
                   help="most header lines in a request head, trailers included (default 100, as Envoy and hyper; then 431)")
    p.add_argument("--proxy-max-pipelined", type=_count, default=_from_env("PROXY_MAX_PIPELINED", _count, _LIMITS.max_pipelined),
                   help="requests of one connection parsed and waiting behind the one being answered (default 16; "
                        "then reading from it pauses)")
    p.add_argument("--proxy-min-body-rate", type=_bytes_or_zero, default=_from_env("PROXY_MIN_BODY_RATE", _bytes_or_zero, _LIMITS.min_body_rate),
                   help="bytes a second a request body must average once it has been coming for --proxy-body-idle-timeout "
                        "(default 8Ki; then 408; '0' turns it off)")
    p.add_argument("--proxy-body-memory-per-client", type=_bytes, default=_from_env("PROXY_BODY_MEMORY_PER_CLIENT", _bytes, _LIMITS.body_memory_per_client),
                   help="of --proxy-body-memory, the most one client address holds (on the Gateway listener: one "
                        "namespace); its requests over it wait without holding up other clients' (default 128Mi)")


def _add_engine_metrics_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument("--proxy-engine-metrics-interval", type=_seconds, default=_seconds(env("PROXY_ENGINE_METRICS_INTERVAL", "1s")),
                   help="how often each Ready server Pod's /metrics is read for engine-aware routing and "
                        "autoscaling (default 1s; '0' turns it off: KubeAI's proxy-count routing)")
    p.add_argument("--proxy-engine-metrics-timeout", type=_seconds, default=_seconds(env("PROXY_ENGINE_METRICS_TIMEOUT", "500ms")),
                   help="bound on one engine metrics read, connect included (default 500ms)")
    p.add_argument("--proxy-engine-metrics-max-bytes", type=int, default=int(env("PROXY_ENGINE_METRICS_MAX_BYTES", str(4 << 20))),
                   help="largest engine metrics answer read; a longer one counts as an error (default 4 MiB)")


def _add_fair_arguments(p: argparse.ArgumentParser) -> None:
    """Fair queuing per tenant per Model while it is saturated (issue #41; serving/routing/fairgate.py)."""
    env = os.environ.get
    p.add_argument("--proxy-fair-queuing", choices=("on", "off"), default=env("PROXY_FAIR_QUEUING", "off"),
                   help="while a Model's engines are saturated, queue its requests per tenant (the caller's namespace; "
                        "with --proxy-auth none the client address) and release them round-robin (default off)")
    p.add_argument("--proxy-fair-queue-length", type=_count, default=_from_env("PROXY_FAIR_QUEUE_LENGTH", _count, _LIMITS.fair.max_queue),
                   help="requests one tenant may have waiting for one Model (default 64; then 429 with Retry-After)")
    p.add_argument("--proxy-fair-queue-wait", type=_positive_seconds, default=_from_env("PROXY_FAIR_QUEUE_WAIT", _positive_seconds, _LIMITS.fair.max_wait),
                   help="how long a request may wait in its tenant's queue (default 30s; then 429 with Retry-After)")
    p.add_argument("--proxy-fair-max-pending", type=_count, default=_from_env("PROXY_FAIR_MAX_PENDING", _count, _LIMITS.fair.max_pending),
                   help="an engine that reports metrics has room while this replica has fewer requests there without a "
                        "first token (default 1), and it reported room (none waiting, KV cache at most 90%%) or "
                        "more of this replica's requests there finished since its report than were sent")
    p.add_argument("--proxy-fair-reserve", type=_count_or_zero,
                   default=_from_env("PROXY_FAIR_RESERVE", _count_or_zero, _LIMITS.fair.reserve),
                   help="while another tenant is active on a Model, a tenant holding more than its weighted share of "
                        "this replica's requests there leaves this many requests of room free on every engine, for "
                        "the others' next requests (default %(default)s; 0: none)")
    p.add_argument("--proxy-fair-prefill-yield", choices=("on", "off"), default=env("PROXY_FAIR_PREFILL_YIELD", "on" if _LIMITS.fair.prefill_yield else "off"),
                   help="while another tenant is active, a tenant over its share sends no new request to an engine "
                        "where a tenant under its share has one without a first token (default %(default)s)")
    p.add_argument("--proxy-fair-quiet-engines", choices=("on", "off"),
                   default=env("PROXY_FAIR_QUIET_ENGINES", "on" if _LIMITS.fair.quiet_engines else "off"),
                   help="while a tenant is over its share of a Model, the Model's first endpoints (as many as the "
                        "others' share of the requests in flight, at least one, never all) take none of its requests, "
                        "and the others send their new conversations there (default %(default)s)")
    p.add_argument("--proxy-fair-in-flight-cap", type=int, default=int(env("PROXY_FAIR_IN_FLIGHT_CAP", "0")),
                   help="an engine without metrics has room while this replica has fewer requests in flight there "
                        "(default 0: no cap, such engines never saturate)")
    p.add_argument("--proxy-fair-event-interval", type=_positive_seconds,
                   default=_from_env("PROXY_FAIR_EVENT_INTERVAL", _positive_seconds, _LIMITS.fair.event_interval),
                   help="the least time between two saturation Events (Saturated, SaturationCleared) on one Model "
                        "from this replica (default 60s)")


def _add_auth_arguments(p: argparse.ArgumentParser) -> None:
    """Caller identity (serving/proxy/auth.py)."""
    env = os.environ.get
    p.add_argument("--proxy-auth", choices=AUTH_MODES, default=env("PROXY_AUTH", "kubernetes"),
                   help="who may use a Model through the proxy (default kubernetes: a bearer token checked with a TokenReview, "
                        "and a SubjectAccessReview for create on kubeai.org models/proxy of that Model); none: anyone who "
                        "reaches the proxy (KubeAI's open proxy, for single-tenant installs only; warned at start-up)")
    p.add_argument("--proxy-auth-cache-ttl", type=_positive_seconds, default=_positive_seconds(env("PROXY_AUTH_CACHE_TTL", "30s")),
                   help="how long an allowed caller decision is cached (default 30s): a removed RoleBinding or an "
                        "expired token is honoured within it")
    p.add_argument("--proxy-auth-deny-ttl", type=_positive_seconds, default=_positive_seconds(env("PROXY_AUTH_DENY_TTL", "5s")),
                   help="how long a denied or invalid caller decision is cached (default 5s)")
    p.add_argument("--proxy-auth-cache-size", type=int, default=int(env("PROXY_AUTH_CACHE_SIZE", "10000")),
                   help="caller decisions cached at most, least recently used dropped first (default 10000)")
    p.add_argument("--proxy-auth-max-reviews", type=int, default=int(env("PROXY_AUTH_MAX_REVIEWS", "16")),
                   help="Token/SubjectAccessReviews in flight at once (default 16; as many more wait, beyond that 503 "
                        "without an API call)")


def proxy_auth(args: argparse.Namespace) -> AuthConfig | None:
    """The caller checks as the flags set them; None for ``--proxy-auth none``."""
    if args.proxy_auth == "none":
        return None
    return AuthConfig(ttl=args.proxy_auth_cache_ttl, deny_ttl=args.proxy_auth_deny_ttl,
                      max_entries=max(1, args.proxy_auth_cache_size), max_reviews=max(1, args.proxy_auth_max_reviews))


def proxy_limits(args: argparse.Namespace) -> ProxyLimits:
    """The proxy's limits as the flags set them."""
    return ProxyLimits(
        head_timeout=args.proxy_header_timeout, body_idle_timeout=args.proxy_body_idle_timeout,
        linger_timeout=args.proxy_linger_timeout, max_head_bytes=args.proxy_max_header_size, max_body_bytes=args.proxy_max_body_size,
        max_upstream_head_bytes=args.proxy_max_upstream_header_size, endpoint_wait=args.proxy_endpoint_wait_timeout,
        body_memory=args.proxy_body_memory, body_memory_wait=args.proxy_body_memory_wait,
        multipart_model_window=args.proxy_multipart_model_window,
        request_timeout=args.proxy_request_timeout or None,
        max_headers=args.proxy_max_header_count, max_pipelined=args.proxy_max_pipelined,
        min_body_rate=args.proxy_min_body_rate, body_memory_per_client=args.proxy_body_memory_per_client,
        fair=FairLimits(enabled=args.proxy_fair_queuing == "on", max_queue=args.proxy_fair_queue_length,
                        max_wait=args.proxy_fair_queue_wait, max_pending=args.proxy_fair_max_pending,
                        in_flight_cap=max(0, args.proxy_fair_in_flight_cap), event_interval=args.proxy_fair_event_interval,
                        reserve=args.proxy_fair_reserve, prefill_yield=args.proxy_fair_prefill_yield == "on",
                        quiet_engines=args.proxy_fair_quiet_engines == "on"),
    )


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
    p.add_argument("--autoscaler-peer-ca-file", default=env("MODEL_AUTOSCALING_PEER_CA_FILE", ""),
                   help="with --metrics-secure: CA the replicas' metrics certificates must verify against before this "
                        "Pod's token is sent to them (default: ca.crt in --metrics-cert-dir; none: peers are not scraped)")
    p.add_argument("--autoscaler-peer-server-name", default=env("MODEL_AUTOSCALING_PEER_SERVER_NAME", ""),
                   help="name the replicas' metrics certificates must carry (default: chain verified only)")


def add_model_controller_arguments(p: argparse.ArgumentParser) -> None:
    """Bulkheads of the Model controller's calls to tenants' Pods (LoRA adapter loads)."""
    env = os.environ.get
    p.add_argument("--adapter-call-timeout", type=_positive_seconds, default=_positive_seconds(env("ADAPTER_CALL_TIMEOUT", "10s")),
                   help="longest call to a model Pod's vLLM server or adapter-loader sidecar (downloads are polled)")
    p.add_argument("--adapter-calls-per-namespace", type=_count, default=_count(env("ADAPTER_CALLS_PER_NAMESPACE", "2")),
                   help="calls to one namespace's model Pods in flight at once (adapter loads run off the reconcile path)")


def adapter_limits(args: argparse.Namespace) -> Any:
    """The adapter loads' limits as the flags set them."""
    from kaiwo_ctrl.serving.model.adapters import AdapterLimits

    return AdapterLimits(call_timeout=args.adapter_call_timeout, per_namespace=args.adapter_calls_per_namespace)


def setup_serving(mgr: Manager, args: argparse.Namespace, *, autoscaler: bool, model_config: Any = None) -> ProxyServer | None:
    """The proxy (unless disabled) and, with ``autoscaler``, the leader-only autoscaler.

    ``model_config`` (a serving ``SystemConfig``) supplies the autoscaler settings the
    flags leave unset; its ``proxy.mode: external`` (KubeAI 0.23) means neither runs here.
    """
    if getattr(model_config, "proxy_mode", "internal") == "external":
        log.info("proxy.mode external: no proxy listener and no autoscaler in this process")
        return None
    server = setup_proxy(mgr, args.proxy_bind_address, limits=proxy_limits(args), gateway_bind=args.proxy_gateway_bind_address,
                         auth=proxy_auth(args),
                         operator_ns=operator_namespace(getattr(args, "leader_election_namespace", None)))
    scraper = None
    if server is not None:
        scraper = attach_scraper(mgr, server.handler.tracker, ScrapeConfig(
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
            peer_ca_file=args.autoscaler_peer_ca_file
            or (f"{args.metrics_cert_dir}/ca.crt" if getattr(args, "metrics_cert_dir", None) else ""),
            peer_server_name=args.autoscaler_peer_server_name,
            namespace=operator_namespace(getattr(args, "leader_election_namespace", None)),
        )
        peers = [p.strip() for p in args.autoscaler_peers.split(",") if p.strip()]
        setup_autoscaler(mgr, cfg, peers=peers, peer_selector=args.autoscaler_peer_selector, peer_port=args.autoscaler_peer_metrics_port,
                         self_proxy=server is not None, engine_load=scraper.model_loads if scraper else None)
    return server
