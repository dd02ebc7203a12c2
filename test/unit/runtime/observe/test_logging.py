import asyncio
import io
import logging
import re

import orjson
import pytest

from kaiwo_ctrl.runtime.observe.logging import current_log_context, log_context, setup_logging

TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.fixture
def capture():
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    buf = io.StringIO()
    handler = setup_logging("debug", "json", stream=buf)

    def lines() -> list[dict]:
        parsed = [orjson.loads(line) for line in buf.getvalue().splitlines()]
        # ignore the event loop's own debug chatter (e.g. selector choice)
        return [line for line in parsed if line["logger"] != "asyncio"]

    yield lines
    root.removeHandler(handler)
    root.setLevel(saved_level)
    assert [h for h in root.handlers if h not in saved_handlers] == []


def test_json_line_has_base_fields(capture):
    logging.getLogger("runtime.test").info("hello %s", "world")
    (line,) = capture()
    assert line["msg"] == "hello world"
    assert line["level"] == "info"
    assert line["logger"] == "runtime.test"
    assert TS_RE.match(line["ts"]), line["ts"]


def test_log_context_fields_are_attached_and_restored(capture):
    log = logging.getLogger("ctl")
    with log_context(controller="widget", namespace="ns1", name="w1", reconcileID="abc-123"):
        log.info("reconciling")
        with log_context(name="w2", step=3):
            log.warning("inner")
        log.info("after inner")
    log.info("outside")
    first, inner, after, outside = capture()
    assert {k: first[k] for k in ("controller", "namespace", "name", "reconcileID")} == {
        "controller": "widget",
        "namespace": "ns1",
        "name": "w1",
        "reconcileID": "abc-123",
    }
    assert inner["name"] == "w2" and inner["step"] == 3 and inner["controller"] == "widget"
    assert inner["level"] == "warning"
    assert after["name"] == "w1" and "step" not in after
    assert "controller" not in outside and "name" not in outside
    assert current_log_context() == {}


def test_context_is_restored_after_exception():
    with pytest.raises(RuntimeError):
        with log_context(controller="x"):
            raise RuntimeError("boom")
    assert current_log_context() == {}


async def test_concurrent_tasks_keep_their_own_context(capture):
    log = logging.getLogger("ctl")

    async def reconcile(name: str) -> None:
        with log_context(name=name):
            for i in range(3):
                log.info("step", extra={"i": i})
                await asyncio.sleep(0)

    await asyncio.gather(reconcile("a"), reconcile("b"))
    lines = [line for line in capture() if line["logger"] == "ctl"]
    assert len(lines) == 6
    # interleaved, yet each line carries its own task's name
    assert [line["name"] for line in lines] != ["a"] * 3 + ["b"] * 3
    for name in "ab":
        assert [line["i"] for line in lines if line["name"] == name] == [0, 1, 2]


def test_extra_fields_and_base_keys_are_protected(capture):
    with log_context(msg="context must not win", level="nope", gpu=2):
        logging.getLogger("x").error("real message", extra={"obj": {"a": [1, 2]}, "gpu": 4})
    (line,) = capture()
    assert line["msg"] == "real message"
    assert line["level"] == "error"
    assert line["obj"] == {"a": [1, 2]}
    assert line["gpu"] == 4  # extra overrides context


def test_exception_and_unencodable_values(capture):
    class Thing:
        def __str__(self) -> str:
            return "<thing>"

    try:
        raise ValueError("bad value")
    except ValueError:
        logging.getLogger("x").exception("failed", extra={"thing": Thing()})
    (line,) = capture()
    assert line["error"] == "ValueError: bad value"
    assert "Traceback" in line["stacktrace"]
    assert line["thing"] == "<thing>"


def test_level_filtering_and_reconfiguration():
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    first, second = io.StringIO(), io.StringIO()
    try:
        setup_logging("warning", "json", stream=first)
        logging.getLogger("x").info("dropped")
        logging.getLogger("x").warning("kept")
        setup_logging("info", "console", stream=second)  # replaces the first handler
        with log_context(controller="widget"):
            logging.getLogger("x").info("human %d", 1)
    finally:
        for h in list(root.handlers):
            if h not in saved_handlers:
                root.removeHandler(h)
        root.setLevel(saved_level)
    lines = first.getvalue().splitlines()
    assert [orjson.loads(x)["msg"] for x in lines] == ["kept"]
    text = second.getvalue()
    assert " INFO " in text and "x human 1" in text and "controller=widget" in text
    assert text.count("\n") == 1


def test_default_stream_is_stderr(capsys):
    root = logging.getLogger()
    saved_level = root.level
    handler = setup_logging()
    try:
        logging.getLogger("to.stderr").info("on stderr")
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert orjson.loads(captured.err.splitlines()[-1])["msg"] == "on stderr"


def test_invalid_arguments():
    with pytest.raises(ValueError, match="level"):
        setup_logging("loud")
    with pytest.raises(ValueError, match="fmt"):
        setup_logging("info", "xml")  # type: ignore[arg-type]
