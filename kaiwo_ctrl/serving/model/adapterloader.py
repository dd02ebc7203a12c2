"""``kaiwo-ctrl adapter-loader --dir /adapters --port 8001``: the adapter sidecar.

An HTTP server inside a vLLM server Pod, called by the controller:

* ``GET /healthz`` -> 200 (the sidecar's readiness probe);
* ``POST /load {"name", "url"}`` downloads the adapter into ``<dir>/<name>``
  (into a temporary directory first, then renamed into place, replacing an
  older copy) with the same downloader as the cache loader. It answers at
  once: 202 while the download runs (started by the first call), 200
  ``{"name", "files"}`` once it is in place, 502 ``{"error"}`` once if it
  failed (the next call starts it again). The controller polls it, so no call
  lasts as long as a download;
* ``POST /unload {"name"}`` removes ``<dir>/<name>``.

Names must match ``^[a-z0-9-]+$`` (the Model's own rule), so nothing is
written outside ``<dir>``. One download runs at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from kaiwo_ctrl.download.model import download_model

NAME = re.compile(r"^[a-z0-9-]{1,63}$")
URL_SCHEMES = ("hf://", "s3://", "gs://", "oss://")


class _Downloads:
    """The sidecar's downloads, one at a time, by adapter name."""

    def __init__(self, root: Path, fetch: Callable[[str, Path], int]) -> None:
        self.root, self.fetch = root, fetch
        self.lock = asyncio.Lock()
        #: name -> (url, the download task); a finished task's result is the file count
        self.loads: dict[str, tuple[str, asyncio.Task[int]]] = {}

    async def _download(self, name: str, url: str) -> int:
        async with self.lock:
            tmp = Path(tempfile.mkdtemp(dir=self.root, prefix=".load-"))
            try:
                files = await asyncio.to_thread(self.fetch, url, tmp)
                dest = self.root / name
                if dest.exists():
                    shutil.rmtree(dest)
                tmp.rename(dest)
                return files
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise

    def poll(self, name: str, url: str) -> web.Response:
        """202 while downloading (started by the first call), 200 once in place, 502 once on failure."""
        have = self.loads.get(name)
        if have is None or have[0] != url:
            if have is not None:
                have[1].cancel()
            task = asyncio.create_task(self._download(name, url))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # kept for the next poll, not logged
            self.loads[name] = (url, task)
            return web.json_response({"name": name, "state": "loading"}, status=202)
        task = have[1]
        if not task.done():
            return web.json_response({"name": name, "state": "loading"}, status=202)
        if task.cancelled() or task.exception() is not None:
            del self.loads[name]  # reported once; the controller's retry starts it again
            e = task.exception() if not task.cancelled() else None
            return web.json_response({"error": f"{type(e).__name__}: {str(e)[:300]}" if e else "cancelled"}, status=502)
        return web.json_response({"name": name, "files": task.result()})

    async def remove(self, name: str) -> None:
        if (have := self.loads.pop(name, None)) is not None:
            have[1].cancel()
        async with self.lock:
            await asyncio.to_thread(shutil.rmtree, self.root / name, True)


async def _body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="body must be JSON") from None
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not NAME.match(name):
        raise web.HTTPBadRequest(text="name must match ^[a-z0-9-]+$")
    return body


def make_app(root: Path, fetch: Callable[[str, Path], int] = download_model) -> web.Application:
    root.mkdir(parents=True, exist_ok=True)
    downloads = _Downloads(root, fetch)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def load(request: web.Request) -> web.Response:
        body = await _body(request)
        url = body.get("url")
        if not isinstance(url, str) or not url.startswith(URL_SCHEMES):
            raise web.HTTPBadRequest(text="url must start with hf://, s3://, gs:// or oss://")
        return downloads.poll(body["name"], url)

    async def unload(request: web.Request) -> web.Response:
        body = await _body(request)
        await downloads.remove(body["name"])
        return web.json_response({"name": body["name"]})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/load", load)
    app.router.add_post("/unload", unload)
    return app


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="kaiwo-ctrl adapter-loader", description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=Path("/adapters"))
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--host", default="0.0.0.0")
    args = p.parse_args(argv)
    web.run_app(make_app(args.dir), host=args.host, port=args.port, print=None)
    return 0
