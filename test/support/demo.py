"""A tiny controller that exercises the runtime end to end (no Kaiwo logic).

For every ConfigMap labelled ``kaiwo-ctrl.dev/demo=mirror`` it keeps a child
ConfigMap ``<name>-mirror`` with the same data, owned by the source. A
source annotated ``kaiwo-ctrl.dev/fail-times: "N"`` makes the first N
reconciles fail, to show the rate-limited retries. The runtime integration
tests use it in-process, and ``python -m support.demo run ...`` (the options of
``kaiwo-ctrl run``) runs it as its own process the way the operator runs.
"""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.runtime.objects.apply import contains
from kaiwo_ctrl.runtime.control.controller import Result
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.objects.ownership import owner_reference
from kaiwo_ctrl.runtime.control.predicate import Filter
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS

LABEL = "kaiwo-ctrl.dev/demo"
FAIL = "kaiwo-ctrl.dev/fail-times"


class DemoFailure(RuntimeError):
    pass


class MirrorReconciler:
    def __init__(self, mgr: Manager) -> None:
        self.client = mgr.client
        self.sources = mgr.cache.informer(CONFIGMAPS)
        self.attempts: dict[str, list[float]] = {}
        self.recorder = mgr.recorder.for_component("demo-mirror")

    async def __call__(self, req: Request) -> Result | None:
        import time

        src = self.sources.get(req.name, req.namespace)
        if src is None or (src["metadata"].get("labels") or {}).get(LABEL) != "mirror":
            return None
        attempts = self.attempts.setdefault(req.key, [])
        attempts.append(time.monotonic())
        fail = int((src["metadata"].get("annotations") or {}).get(FAIL, "0"))
        if len(attempts) <= fail:
            raise DemoFailure(f"failing on purpose ({len(attempts)}/{fail})")
        desired: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{req.name}-mirror",
                "namespace": req.namespace,
                "labels": {f"{LABEL}-of": req.name},
                "ownerReferences": [owner_reference(src)],
            },
            "data": dict(src.get("data") or {}),
        }
        current = self.sources.get(f"{req.name}-mirror", req.namespace)
        if current is not None and contains(current, desired) and set(current.get("data") or {}) == set(desired["data"]):
            return None
        await self.client.apply(CONFIGMAPS, desired)
        self.recorder.normal(src, "Mirrored", f"mirrored {len(desired['data'])} keys to {req.name}-mirror")
        return None


def add_demo_controller(mgr: Manager, *, tracer: Any = None, rate_limiter: Any = None) -> MirrorReconciler:
    rec = MirrorReconciler(mgr)
    ctl = mgr.new_controller("demo-mirror", rec, workers=4, tracer=tracer, rate_limiter=rate_limiter)
    is_source = Filter(lambda o: (o.get("metadata", {}).get("labels") or {}).get(LABEL) == "mirror")
    ctl.for_(rec.sources, predicates=[is_source])
    ctl.owns(rec.sources, "", "ConfigMap")
    return rec


async def _build(mgr: Manager, *, workers: int = 16, tracer: Any = None) -> None:
    add_demo_controller(mgr, tracer=tracer)


def main(argv: list[str] | None = None) -> int:
    """``kaiwo-ctrl run`` with the demo controller instead of the operator's."""
    import asyncio
    import sys

    from kaiwo_ctrl import cli
    from kaiwo_ctrl.runtime.observe.logging import setup_logging

    args = cli.build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(args.log_level, args.log_format)
    return asyncio.run(cli._run_async(args, build=_build))


if __name__ == "__main__":
    raise SystemExit(main())
