"""A simulated GPU metrics exporter on loopback, for the simulated cluster and the tests of
idle-GPU reclaim: per simulated Pod it serves both vendors' activity metrics (AMD's
``gpu_gfx_activity``, NVIDIA DCGM's ``DCGM_FI_DEV_GPU_UTIL``) with the labels the real
exporters use, and a test sets each Pod's activity.

    exporter = GpuExporter(); await exporter.start()       # exporter.url -> http://127.0.0.1:<port>/metrics
    exporter.set("team", "train-0", 2.0, gpus=2)            # AMD, two GPUs at 2 %
    exporter.set("team", "serve-0", 80.0, vendor="nvidia")  # NVIDIA
    exporter.drop("team", "train-0"); exporter.fail(503)    # a Pod gone; an exporter outage
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web


@dataclass
class _Pod:
    value: float
    gpus: int
    vendor: str


class GpuExporter:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.url = ""
        self.scrapes = 0
        self.status = 200
        self.pods: dict[tuple[str, str], _Pod] = {}
        self._runner: web.AppRunner | None = None

    def set(self, namespace: str, pod: str, value: float, *, gpus: int = 1, vendor: str = "amd") -> None:
        if vendor not in ("amd", "nvidia"):
            raise ValueError("vendor is amd or nvidia")
        self.pods[(namespace, pod)] = _Pod(float(value), gpus, vendor)

    def drop(self, namespace: str, pod: str) -> None:
        self.pods.pop((namespace, pod), None)

    def fail(self, status: int) -> None:
        """Answer ``status`` (200 again to recover)."""
        self.status = status

    def text(self) -> str:
        amd = ["# HELP gpu_gfx_activity GPU activity (percent)", "# TYPE gpu_gfx_activity gauge"]
        nv = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
        index = 0
        for (ns, pod), p in sorted(self.pods.items()):
            for gpu in range(p.gpus):
                if p.vendor == "amd":
                    amd.append(f'gpu_gfx_activity{{gpu_id="{gpu}",gpu_partition_id="0",namespace="{ns}",pod="{pod}",'
                               f'container="main",hostname="sim-node"}} {p.value}')
                else:
                    nv.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-sim-{index}",device="nvidia{gpu}",'
                              f'Hostname="sim-node",namespace="{ns}",pod="{pod}",container="main"}} {p.value}')
                index += 1
        # a series of a GPU no Pod holds, as real exporters report
        amd.append('gpu_gfx_activity{gpu_id="7",gpu_partition_id="0",namespace="",pod="",container="",hostname="sim-node"} 0')
        return "\n".join(amd + nv) + "\n"

    async def start(self) -> None:
        async def metrics(_req: web.Request) -> web.Response:
            self.scrapes += 1
            if self.status != 200:
                return web.Response(status=self.status, text="unavailable")
            return web.Response(text=self.text(), content_type="text/plain")

        app = web.Application()
        app.add_routes([web.get("/metrics", metrics)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{self.host}:{port}/metrics"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
