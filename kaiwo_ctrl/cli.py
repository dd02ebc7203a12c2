"""``kaiwo-ctrl``: run the operator, start a local control plane, render, download."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

DEFAULT_LOCAL_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kaiwo-ctrl" / "local"


def _env_bool(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    return default if v is None else v.strip().lower() in ("1", "true", "yes", "on")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kaiwo-ctrl", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

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
    run.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "info"))
    run.add_argument(
        "--log-format",
        default="console" if os.environ.get("FORMATTED_LOGS") == "true" else os.environ.get("LOG_FORMAT", "json"),
        choices=["json", "console"],
    )
    run.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", "16")), help="reconcile workers per workload controller")
    run.add_argument("--tracing", default=os.environ.get("TRACING_EXPORTER", "none"), help="none | console | otlp")
    run.add_argument("--demo", action="store_true", help=argparse.SUPPRESS)

    local = sub.add_parser("local", help="a local control plane (etcd + kube-apiserver + CRDs)")
    lsub = local.add_subparsers(dest="local_cmd", required=True)
    up = lsub.add_parser("up", help="start it and return; processes keep running")
    up.add_argument("--dir", type=Path, default=DEFAULT_LOCAL_DIR)
    up.add_argument("--simulate", action="store_true", help="also run controller-manager, scheduler, kwok (Pods run on fake Nodes) and Kueue")
    down = lsub.add_parser("down", help="stop it and remove its directory")
    down.add_argument("--dir", type=Path, default=DEFAULT_LOCAL_DIR)
    down.add_argument("--keep", action="store_true", help="keep the directory (logs)")

    render = sub.add_parser("render", help="print the children the operator would create, without a cluster")
    render.add_argument("file", type=Path)
    render.add_argument("--nodes", type=Path, default=None, help="YAML with Node objects (GPU node pools)")
    render.add_argument("--config", type=Path, default=None, help="YAML with a KaiwoConfig")

    dl = sub.add_parser("download", help="the download Job's program", add_help=False)
    dl.add_argument("rest", nargs=argparse.REMAINDER)

    gen = sub.add_parser("gen", help="generators")
    gsub = gen.add_subparsers(dest="gen_cmd", required=True)
    crds = gsub.add_parser("crds", help="write config/crd/bases from the typed API")
    crds.add_argument("--check", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["download"]:
        from kaiwo_ctrl.download.main import main as download_main

        return download_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.cmd == "run":
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
        cp = ControlPlane(args.dir.resolve(), assets, components=components).start()
    except ControlPlaneError as e:
        print(f"local up failed: {e}", file=sys.stderr)
        return 1
    print(f"control plane up in {time.monotonic() - t0:.1f}s at {cp.url} ({', '.join(cp.processes)})")
    print(f"kubeconfig: {cp.kubeconfig}")
    print(f"  export KUBECONFIG={cp.kubeconfig}")
    print(f"stop with: kaiwo-ctrl local down --dir {args.dir}")
    return 0


def _render(args: argparse.Namespace) -> int:
    import yaml

    from kaiwo_ctrl.workloads.render import render

    docs = [d for d in yaml.safe_load_all(args.file.read_text()) if d]
    nodes = None
    if args.nodes:
        nodes = []
        for d in yaml.safe_load_all(args.nodes.read_text()):
            if d and d.get("kind") == "List":
                nodes += d.get("items", [])
            elif d:
                nodes.append(d)
    config = yaml.safe_load(args.config.read_text()) if args.config else None
    out = render(docs, nodes=nodes, config=config)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
    return 0


def _run(args: argparse.Namespace) -> int:
    from kaiwo_ctrl.runtime.logging import setup_logging

    setup_logging(args.log_level, args.log_format)
    try:
        return asyncio.run(_run_async(args))
    except KeyboardInterrupt:
        return 130


async def _run_async(args: argparse.Namespace) -> int:
    import logging

    from kaiwo_ctrl.operator import build_operator
    from kaiwo_ctrl.runtime.client import Client
    from kaiwo_ctrl.runtime.manager import LeaderElectionConfig, LeadershipLost, Manager
    from kaiwo_ctrl.runtime.tracing import setup_tracing

    log = logging.getLogger("kaiwo_ctrl")
    client = await Client.from_kubeconfig(args.kubeconfig, field_manager="kaiwo-ctrl")
    le = None
    if args.leader_elect:
        ns = args.leader_election_namespace or _pod_namespace() or "kaiwo-system"
        le = LeaderElectionConfig(name=args.leader_election_id, namespace=ns)
    mgr = Manager(
        client,
        metrics_addr=args.metrics_bind_address,
        health_addr=args.health_probe_bind_address,
        leader_election=le,
    )
    tracer = setup_tracing(args.tracing)
    await build_operator(mgr, workers=args.workers, tracer=tracer, demo=args.demo)

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
    try:
        await mgr.run(stop)
    except LeadershipLost:
        log.error("leader lease lost, exiting")
        return 1
    return 0


def _pod_namespace() -> str | None:
    p = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return p.read_text().strip() if p.exists() else None


if __name__ == "__main__":
    raise SystemExit(main())
