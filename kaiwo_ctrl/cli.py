"""``kaiwo-ctrl``: run the operator, start a local control plane, render, download."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_LOCAL_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kaiwo-ctrl" / "local"


def _env_bool(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    return default if v is None else v.strip().lower() in ("1", "true", "yes", "on")


def _add_metrics_security(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-secure",
        action="store_true",
        default=_env_bool("METRICS_SECURE", False),
        help="serve /metrics over TLS and only to bearer tokens allowed 'get' on the /metrics URL "
        "(TokenReview + SubjectAccessReview); needs its own --metrics-bind-address",
    )
    p.add_argument("--metrics-cert-dir", default=os.environ.get("METRICS_CERT_DIR"),
                   help="tls.crt and tls.key for --metrics-secure (default: a self-signed certificate)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kaiwo-ctrl", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    _add_run_command(sub)
    _add_proxy_command(sub)
    _add_local_command(sub)

    render = sub.add_parser("render", help="print the children the operator would create, without a cluster")
    render.add_argument("file", type=Path)
    render.add_argument("--nodes", type=Path, default=None, help="YAML with Node objects (GPU node pools)")
    render.add_argument("--config", type=Path, default=None, help="YAML with a KaiwoConfig")
    render.add_argument("--model-config", type=Path, default=None, help="KubeAI-style system config for Models (default: built-in)")

    sub.add_parser("adapter-loader", help="the LoRA adapter sidecar of Model server Pods", add_help=False)
    dl = sub.add_parser("download", help="the download Job's program", add_help=False)
    dl.add_argument("rest", nargs=argparse.REMAINDER)

    gen = sub.add_parser("gen", help="generators")
    gsub = gen.add_subparsers(dest="gen_cmd", required=True)
    crds = gsub.add_parser("crds", help="write config/crd/bases from the typed API")
    crds.add_argument("--check", action="store_true")
    return p


def _add_run_command(sub: Any) -> None:
    run = sub.add_parser("run", help="run the operator (out of cluster with a kubeconfig, or in cluster)")
    run.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    run.add_argument("--leader-elect", action="store_true", default=_env_bool("LEADER_ELECT", False))
    run.add_argument("--leader-election-id", default="83fc2279.silogen.ai")
    run.add_argument(
        "--leader-election-namespace",
        default=os.environ.get("POD_NAMESPACE"),
        help="namespace of the Lease (default: the pod's namespace, else kaiwo-system)",
    )
    run.add_argument("--metrics-bind-address", default=os.environ.get("METRICS_BIND_ADDRESS", ":8080"), help="'0' disables")
    run.add_argument("--health-probe-bind-address", default=os.environ.get("HEALTH_PROBE_BIND_ADDRESS", ":8081"))
    _add_metrics_security(run)
    run.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "info"))
    run.add_argument(
        "--log-format",
        default="console" if os.environ.get("FORMATTED_LOGS") == "true" else os.environ.get("LOG_FORMAT", "json"),
        choices=["json", "console"],
    )
    run.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", "16")), help="reconcile workers per workload controller")
    run.add_argument("--tracing", default=os.environ.get("TRACING_EXPORTER", "none"), help="none | console | otlp")
    run.add_argument(
        "--model-config",
        default=os.environ.get("MODEL_CONFIG") or None,
        help="KubeAI-style system config for Models (YAML; re-read when it changes). Default: built-in profiles and images",
    )
    _webhook_args(run)
    from kaiwo_ctrl.serving.command import add_autoscaler_arguments, add_model_controller_arguments, add_proxy_arguments

    add_proxy_arguments(run)
    add_autoscaler_arguments(run)
    add_model_controller_arguments(run)


def _add_proxy_command(sub: Any) -> None:
    from kaiwo_ctrl.serving.command import add_proxy_arguments

    proxy = sub.add_parser("proxy", help="serve only the OpenAI-compatible proxy, without the controllers")
    proxy.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    proxy.add_argument("--metrics-bind-address", default=os.environ.get("METRICS_BIND_ADDRESS", ":8080"), help="'0' disables")
    proxy.add_argument("--health-probe-bind-address", default=os.environ.get("HEALTH_PROBE_BIND_ADDRESS", ":8081"))
    proxy.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "info"))
    proxy.add_argument("--log-format", default=os.environ.get("LOG_FORMAT", "json"), choices=["json", "console"])
    _add_metrics_security(proxy)
    add_proxy_arguments(proxy)


def _add_local_command(sub: Any) -> None:
    local = sub.add_parser("local", help="a local control plane (etcd + kube-apiserver + CRDs)")
    lsub = local.add_subparsers(dest="local_cmd", required=True)
    up = lsub.add_parser("up", help="start it and return; processes keep running")
    up.add_argument("--dir", type=Path, default=DEFAULT_LOCAL_DIR)
    up.add_argument("--simulate", action="store_true", help="also run controller-manager, scheduler, kwok (Pods run on fake Nodes), Kueue, KubeRay, AppWrapper "
                    "and a simulated Ray dashboard")
    up.add_argument("--sim-forward", action="append", default=None, metavar="POD_PORT[:LOCAL_PORT]",
                    help="with --simulate: port-forward to pod port POD_PORT reaches 127.0.0.1:LOCAL_PORT "
                    "(repeatable; default: 80, 8000, 8080, 8265 and 8888 to the same local port)")
    up.add_argument("--no-sim-exec", dest="sim_exec", action="store_false",
                    help="with --simulate: no exec into simulated pods (exec runs the command on this machine, "
                    "and kwok's kubelet endpoint on 127.0.0.1 authenticates nobody)")
    down = lsub.add_parser("down", help="stop it and remove its directory")
    down.add_argument("--dir", type=Path, default=DEFAULT_LOCAL_DIR)
    down.add_argument("--keep", action="store_true", help="keep the directory (logs)")


def _webhook_args(run: argparse.ArgumentParser) -> None:
    env = os.environ.get
    w = run.add_argument_group("admission webhooks")
    w.add_argument("--webhook-bind-address", default=env("WEBHOOK_BIND_ADDRESS", "0"),
                   help="host:port of the HTTPS webhook server; '0' (default) disables the webhooks")
    w.add_argument("--webhook-url-host", default=env("WEBHOOK_URL_HOST"),
                   help="out of cluster: register the webhooks with url https://HOST:PORT instead of the Service")
    w.add_argument("--webhook-service-name", default=env("WEBHOOK_SERVICE_NAME", "kaiwo-webhook-service"))
    w.add_argument("--webhook-config-prefix", default=env("WEBHOOK_CONFIG_PREFIX", "kaiwo"),
                   help="names: PREFIX-mutating-webhook-configuration, PREFIX-validating-webhook-configuration")
    w.add_argument("--webhook-cert-secret", default=env("WEBHOOK_CERT_SECRET", "kaiwo-webhook-server-cert"))
    w.add_argument("--webhook-cert-source", choices=["self", "secret"], default=env("WEBHOOK_CERT_SOURCE", "self"),
                   help="self: the operator issues and rotates its CA and certificate in --webhook-cert-secret; "
                        "secret: another issuer (cert-manager) writes that Secret (tls.crt, tls.key, ca.crt) and "
                        "the operator serves it and publishes its ca.crt as the caBundle")
    w.add_argument("--webhook-cert-validity", default=env("WEBHOOK_CERT_VALIDITY", "2160h"),
                   help="serving certificate lifetime (Go duration); renewed with a third left")
    w.add_argument("--enforcement-namespace-selector", default=env("ENFORCEMENT_NAMESPACE_SELECTOR", ""),
                   help="label selector of the namespaces where ENFORCE_KAIWO_ON_GPU_WORKLOADS applies "
                        "(kube-system and the operator's namespace are always left out)")
    w.add_argument("--enforcement-failure-policy", choices=["Fail", "Ignore"],
                   default=env("ENFORCEMENT_FAILURE_POLICY", "Fail"))


def _webhook_options(args: argparse.Namespace, namespace: str):
    if not args.webhook_bind_address or args.webhook_bind_address == "0":
        return None
    from kaiwo_ctrl.webhooks import WebhookOptions
    from api.meta import parse_duration

    host, _, port = args.webhook_bind_address.rpartition(":")
    return WebhookOptions(
        host=host or "0.0.0.0", port=int(port), namespace=namespace, url_host=args.webhook_url_host,
        service_name=args.webhook_service_name, config_prefix=args.webhook_config_prefix,
        secret_name=args.webhook_cert_secret, cert_validity=parse_duration(args.webhook_cert_validity),
        enforce=os.environ.get("ENFORCE_KAIWO_ON_GPU_WORKLOADS", "").strip().lower() == "true",
        enforcement_namespace_selector=args.enforcement_namespace_selector,
        enforcement_failure_policy=args.enforcement_failure_policy,
        external_certs=args.webhook_cert_source == "secret",
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["adapter-loader"]:
        from kaiwo_ctrl.serving.model.adapterloader import main as loader_main

        return loader_main(argv[1:])
    if argv[:1] == ["download"]:
        from kaiwo_ctrl.download.main import main as download_main

        return download_main(argv[1:])
    if argv[:1] in (["run"], ["proxy"]):
        from kaiwo_ctrl.runtime.process import heap

        heap.tune()  # before the imports: they make ~150k long-lived objects the default thresholds walk repeatedly
    args = build_parser().parse_args(argv)
    if args.cmd in ("run", "proxy"):
        return _run(args)
    if args.cmd == "local":
        return _local(args)
    if args.cmd == "render":
        return _render(args)
    if args.cmd == "gen":
        from api.crdgen import main as gen_main

        return gen_main(["--check"] if args.check else [])
    return 2


def _local(args: argparse.Namespace) -> int:
    from kaiwo_ctrl.local.controlplane import SIMULATE_COMPONENTS, ControlPlane, ControlPlaneError, locate_assets

    if args.local_cmd == "down":
        stopped = ControlPlane.down(args.dir, remove=not args.keep)
        print(f"stopped: {', '.join(stopped) or 'nothing running'}")
        return 0
    if (args.dir / "state.json").exists():
        print(f"a control plane is already recorded in {args.dir}; run: kaiwo-ctrl local down --dir {args.dir}", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    try:
        assets = locate_assets()
        components = SIMULATE_COMPONENTS if args.simulate else ()
        cp = ControlPlane(args.dir.resolve(), assets, components=components,
                          sim_forwards=_forwards(args.sim_forward), sim_exec=args.sim_exec).start()
    except ControlPlaneError as e:
        print(f"local up failed: {e}", file=sys.stderr)
        return 1
    print(f"control plane up in {time.monotonic() - t0:.1f}s at {cp.url} ({', '.join(cp.processes)})")
    print(f"kubeconfig: {cp.kubeconfig}")
    print(f"  export KUBECONFIG={cp.kubeconfig}")
    print(f"stop with: kaiwo-ctrl local down --dir {args.dir}")
    return 0


def _forwards(specs: list[str] | None) -> dict[int, int] | None:
    """``--sim-forward 8000`` / ``8000:18000`` -> {pod port: local port}; None keeps the defaults."""
    if specs is None:
        return None
    out = {}
    for spec in specs:
        pod, _, local = spec.partition(":")
        try:
            ports = int(pod), int(local or pod)
        except ValueError:
            raise SystemExit(f"--sim-forward {spec!r}: expected POD_PORT[:LOCAL_PORT]") from None
        if not all(0 < p < 65536 for p in ports):
            raise SystemExit(f"--sim-forward {spec!r}: ports are 1-65535")
        out[ports[0]] = ports[1]
    return out


def _render(args: argparse.Namespace) -> int:
    """Exit 2 with one line naming the file, or the object and field, on bad input."""
    import yaml

    from kaiwo_ctrl.workloads.reconcile.render import render

    try:
        docs = [d for d in yaml.safe_load_all(args.file.read_text()) if d]
        nodes = None
        if args.nodes:
            nodes = []
            for d in yaml.safe_load_all(args.nodes.read_text()):
                if isinstance(d, dict) and d.get("kind") == "List":
                    nodes += d.get("items", [])
                elif isinstance(d, dict):
                    nodes.append(d)
        config = yaml.safe_load(args.config.read_text()) if args.config else None
    except (OSError, yaml.YAMLError) as e:
        print(f"render: {e}", file=sys.stderr)
        return 2
    try:
        out = render(docs, nodes=nodes, config=config)
    except ValueError as e:  # RenderError names the object and field; a bad --config fails its schema
        print(f"render: {e}", file=sys.stderr)
        return 2
    if any(isinstance(d, dict) and d.get("kind") == "Model" for d in docs):
        from kaiwo_ctrl.serving.model.config import ConfigError, load_config
        from kaiwo_ctrl.serving.model.render import RenderError, render as render_models

        try:
            out += render_models(docs, load_config(args.model_config))
        except (ConfigError, RenderError) as e:
            print(str(e), file=sys.stderr)
            return 2
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
    return 0


def _run(args: argparse.Namespace) -> int:
    from kaiwo_ctrl.listeners import bind_or_exit_code
    from kaiwo_ctrl.runtime.observe.logging import setup_logging

    from kaiwo_ctrl.runtime.process.loop import run

    setup_logging(args.log_level, args.log_format)
    if (code := bind_or_exit_code(args)) is not None:  # before anything starts: exit naming the flag
        return code
    try:
        return run(_run_async(args))
    except KeyboardInterrupt:
        return 130


async def _run_async(args: argparse.Namespace, build: Any = None) -> int:
    """Run a manager wired by ``build`` (default: the operator's controllers)."""
    import logging

    from kaiwo_ctrl.operator import build_operator
    from kaiwo_ctrl.runtime.api.client import Client
    from kaiwo_ctrl.runtime.manager.leaderelection import LeaseNamespaceMissing
    from kaiwo_ctrl.runtime.manager.manager import LeadershipLost
    from kaiwo_ctrl.runtime.observe.tracing import setup_tracing

    from kaiwo_ctrl.serving.model.config import ConfigError, ConfigSource
    from kaiwo_ctrl.settings import operator_namespace
    from kaiwo_ctrl.listeners import ListenerError, failed

    log = logging.getLogger("kaiwo_ctrl")
    try:
        model_config = ConfigSource(getattr(args, "model_config", None))  # an invalid file stops start-up, naming the key
    except ConfigError as e:
        print(str(e), file=sys.stderr)
        return 2
    client = await Client.from_kubeconfig(args.kubeconfig, field_manager="kaiwo-ctrl")
    mgr = _new_manager(args, client)
    from kaiwo_ctrl.serving.command import adapter_limits, setup_serving

    if args.cmd == "run":
        tracer = setup_tracing(args.tracing)
        if build is not None:
            await build(mgr, workers=args.workers, tracer=tracer)
        else:
            namespace = operator_namespace(args.leader_election_namespace)
            await build_operator(
                mgr, workers=args.workers, tracer=tracer, model_config=model_config,
                webhooks=_webhook_options(args, namespace), adapter_limits=adapter_limits(args),
            )
    # A custom build (a test harness) wires only its own controllers: no proxy, no autoscaler.
    if build is None:  # the proxy, on every replica, is a runnable of the manager (setup_proxy)
        setup_serving(mgr, args, autoscaler=args.cmd == "run", model_config=model_config.current)

    stop = _stop_on_signals(log)
    try:
        await mgr.run(stop)
    except ListenerError as e:  # taken after the start-up check (a race): same message, same exit code
        return failed(args, e)
    except LeadershipLost:
        log.error("leader lease lost, exiting")
        return 1
    except LeaseNamespaceMissing as e:
        # fail fast: creating namespaces would need a cluster-wide grant the operator should not have
        msg = (f"{e}: create it (kubectl create namespace {e.namespace}) or choose an existing one with "
               "--leader-election-namespace (env POD_NAMESPACE)")
        log.error(msg)
        print(f"kaiwo-ctrl: {msg}", file=sys.stderr)
        return 2
    return 0


def _new_manager(args: argparse.Namespace, client: Any) -> Any:
    """The Manager of ``run``/``proxy``: leader election and secure metrics as the flags ask."""
    from kaiwo_ctrl.runtime.manager.manager import LeaderElectionConfig, Manager
    from kaiwo_ctrl.settings import operator_namespace

    le = None
    if getattr(args, "leader_elect", False):
        le = LeaderElectionConfig(name=args.leader_election_id, namespace=operator_namespace(args.leader_election_namespace))
    mgr = Manager(
        client,
        metrics_addr=args.metrics_bind_address,
        health_addr=args.health_probe_bind_address,
        leader_election=le,
    )
    if getattr(args, "metrics_secure", False):
        from kaiwo_ctrl.runtime.observe.metricsauth import MetricsAuth, server_ssl_context

        cert_dir = args.metrics_cert_dir
        mgr.metrics_auth = MetricsAuth(client)
        mgr.metrics_ssl = server_ssl_context(
            f"{cert_dir}/tls.crt" if cert_dir else None, f"{cert_dir}/tls.key" if cert_dir else None
        )
    return mgr


def _stop_on_signals(log: Any) -> asyncio.Event:
    """An event SIGTERM/SIGINT sets; a second signal exits at once."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = {"n": 0}

    def on_signal() -> None:
        signals["n"] += 1
        if signals["n"] > 1:
            log.warning("second signal, exiting now")
            os._exit(1)
        log.info("shutting down")
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    return stop


if __name__ == "__main__":
    raise SystemExit(main())
