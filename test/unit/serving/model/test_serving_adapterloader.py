"""The adapter-loader sidecar answers /load at once: 202 while its download runs,
200 once the adapter is in place, 502 once when it failed (the next call retries),
so no call from the controller lasts as long as a download."""

from __future__ import annotations

import threading
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from kaiwo_ctrl.serving.model.adapterloader import make_app
from support import eventually


async def test_load_answers_202_while_downloading_then_200(tmp_path):
    release = threading.Event()
    calls: list[str] = []

    def slow_fetch(url: str, target: Path) -> int:
        calls.append(url)
        release.wait(30)
        (target / "adapter_config.json").write_text(url)
        return 1

    async with TestClient(TestServer(make_app(tmp_path / "a", slow_fetch))) as c:
        body = {"name": "sql", "url": "hf://org/sql"}
        assert (await c.post("/load", json=body)).status == 202
        assert (await c.post("/load", json=body)).status == 202  # still running: not started twice
        release.set()

        async def done() -> bool:
            return (await c.post("/load", json=body)).status == 200

        await eventually(done, what="download done")
        assert calls == ["hf://org/sql"]
        assert (tmp_path / "a" / "sql" / "adapter_config.json").read_text() == "hf://org/sql"


async def test_a_failed_download_is_reported_once_then_started_again(tmp_path):
    calls: list[str] = []

    def failing(url: str, target: Path) -> int:
        calls.append(url)
        raise RuntimeError("no such repo")

    async with TestClient(TestServer(make_app(tmp_path / "a", failing))) as c:
        body = {"name": "sql", "url": "hf://org/sql"}
        assert (await c.post("/load", json=body)).status == 202

        async def failed() -> bool:
            r = await c.post("/load", json=body)
            return r.status == 502 and "no such repo" in (await r.json())["error"]

        await eventually(failed, what="the failure reported")
        assert (await c.post("/load", json=body)).status == 202  # a retry starts it again
        await eventually(failed, what="the second failure reported")
        assert len(calls) == 2
        assert not [p for p in (tmp_path / "a").iterdir() if p.name.startswith(".load-")]  # no temporary left
