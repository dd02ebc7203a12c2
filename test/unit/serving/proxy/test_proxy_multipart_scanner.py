"""The incremental multipart scanner (kaiwo_ctrl/serving/proxy/multipart.py): the
``model`` part found as a form arrives in chunks split anywhere, within a bounded
prefix, and the rest of the form handed on with the right length."""

from __future__ import annotations

import hashlib

import pytest

from kaiwo_ctrl.runtime.net.http1body import STREAM_BUFFER, BodyStream, StreamBody
from kaiwo_ctrl.runtime.net.http1budget import BudgetBusy
from kaiwo_ctrl.runtime.net.http1server import Request
from kaiwo_ctrl.serving.proxy.handler import ProxyHandler
from kaiwo_ctrl.serving.limits import ProxyLimits
from kaiwo_ctrl.serving.proxy.multipart import ModelPartScanner, check_boundary, split_multipart_model, take_model_part
from kaiwo_ctrl.serving.routing.resolve import ProxyError

B = "XyZ-7f"


def part(name: str, content: str | bytes, extra: str = "", boundary: str = B) -> bytes:
    data = content if isinstance(content, bytes) else content.encode()
    return f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'.encode() + data + b"\r\n"


def end(boundary: str = B) -> bytes:
    return f"--{boundary}--\r\n".encode()


FILE = part("file", b"RIFF\x00\x01" * 50, '; filename="a.wav"')
MODEL = part("model", "whisper-1")


def scan_in(form: bytes, size: int, window: int = 1 << 20, boundary: str = B) -> ModelPartScanner:
    s = ModelPartScanner(boundary.encode(), window)
    for i in range(0, len(form), size):
        if s.feed(form[i:i + size]) or s.over:
            break
    return s


def rest_of(s: ModelPartScanner) -> bytes:
    assert s.span is not None
    return bytes(s.buf[:s.span[0]] + s.buf[s.span[1]:])


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 13, 64, 1 << 20])
@pytest.mark.parametrize("form, model, rest", [
    (MODEL + FILE + end(), "whisper-1", FILE + end()),
    (FILE + MODEL + end(), "whisper-1", FILE + end()),
    (part("language", "en") + MODEL + FILE + end(), "whisper-1", part("language", "en") + FILE + end()),
    (part("model", " spaced ") + end(), "spaced", end()),
    (b"a preamble line\r\n" + MODEL + FILE + end(), "whisper-1", b"a preamble line\r\n" + FILE + end()),
])
def test_model_part_found_whatever_the_chunk_split(form, model, rest, size):
    """Every split point, delimiters and the head's CRLFCRLF included, gives the same answer as a whole scan."""
    s = scan_in(form, size)
    assert s.done and s.model == model
    assert rest_of(s) == rest[:len(rest_of(s))], "the prefix held, less the model part"
    assert split_multipart_model(form, B) == (model, rest)


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_form_without_a_model_part_is_done_at_its_closing_delimiter(size):
    s = scan_in(FILE + end() + MODEL, size)
    assert s.done and s.model is None and s.span is None


def test_model_part_past_the_window_is_over_holding_only_the_window_and_one_chunk():
    big = part("file", b"\0" * (256 << 10), '; filename="a.wav"')
    s = scan_in(big + MODEL + end(), 4096, window=64 << 10)
    assert s.over and not s.done and s.model is None
    assert len(s.buf) <= (64 << 10) + 4096


def test_the_boundary_inside_a_line_of_a_file_is_not_a_delimiter():
    """Only CRLF--boundary delimits: a file line with the boundary string mid-line, or a
    name="model" header inside the file's content, does not end the file part."""
    trap = f'x--{B}\r\nContent-Disposition: form-data; name="model"\r\n\r\nevil\r\n'.encode()
    form = part("file", trap, '; filename="a.txt"') + part("model", "good") + end()
    rest = part("file", trap, '; filename="a.txt"') + end()
    s = scan_in(form, 3)
    assert s.model == "good" and rest.startswith(rest_of(s))
    assert split_multipart_model(form, B) == ("good", rest)


def test_lf_only_forms_have_no_model_part():
    """RFC 7578 forms use CRLF; bare LF lines are not delimiters, so no model part is seen (the caller's 400)."""
    form = f'--{B}\nContent-Disposition: form-data; name="model"\n\nw\n--{B}--\n'.encode()
    s = scan_in(form, 5)
    assert s.model is None and not s.done


@pytest.mark.parametrize("header", [
    'Content-Disposition: form-data; name=model',
    'content-disposition: form-data;name="model"',
    'CONTENT-DISPOSITION: form-data; name="model"; x=y',
])
def test_content_disposition_variations(header):
    form = f"--{B}\r\n{header}\r\nContent-Type: text/plain\r\n\r\nw1\r\n".encode() + FILE + end()
    assert scan_in(form, 2).model == "w1"


@pytest.mark.parametrize("boundary", ["", "x" * 71, "bö", None])
def test_hostile_boundaries_are_400(boundary):
    with pytest.raises(ProxyError) as e:
        check_boundary(boundary)
    assert e.value.status == 400


@pytest.mark.parametrize("boundary", ["a", "(.*)+[", "x" * 70, "--"])
def test_odd_but_valid_boundaries_are_literal(boundary):
    form = part("model", "m", boundary=boundary) + part("file", "f", boundary=boundary) + end(boundary)
    assert check_boundary(boundary) == boundary.encode()
    assert scan_in(form, 3, boundary=boundary).model == "m"


def _stream(form: bytes, size: int, hold=None) -> BodyStream:
    s = BodyStream(len(form), lambda: None, hold)
    for i in range(0, len(form), size):
        s.feed(form[i:i + size])
    s.end()
    return s


async def _collect(body) -> bytes:
    return b"".join([bytes(c) async for c in body])


@pytest.mark.parametrize("size", [1, 7, 4096])
async def test_take_model_part_hands_on_the_rest_with_its_length(size):
    data = bytes(range(256)) * 4096  # 1 MiB of file
    form = MODEL + part("file", data, '; filename="a.wav"') + end()
    model, body = await take_model_part(_stream(form, size), B.encode(), 64 << 10)
    assert isinstance(body, StreamBody), "model part first: the rest streams"
    out = await _collect(body)
    assert model == "whisper-1" and body.length == len(form) - len(MODEL) == len(out)
    assert hashlib.sha256(out).digest() == hashlib.sha256(part("file", data, '; filename="a.wav"') + end()).digest()


class Hold:
    """Stands in for the server's budget: records how much of the stream was unread when asked."""

    def __init__(self, busy: bool = False) -> None:
        self.calls: list[int] = []
        self.busy = busy
        self.stream: BodyStream | None = None

    async def __call__(self) -> None:
        assert self.stream is not None
        self.calls.append(self.stream.buffered)
        if self.busy:
            raise BudgetBusy("spent")


def _held_stream(form: bytes, size: int, hold: Hold) -> BodyStream:
    hold.stream = s = _stream(form, size, hold)
    return s


@pytest.mark.parametrize("size", [1000, 4096, 32 << 10])
async def test_model_part_past_the_window_holds_the_form_whole_after_taking_the_budget(size):
    """The file first, as OpenAI's curl example sends it: the form is held whole (the budget asked
    once, while most of it was still unread) and forwarded whole, less its model part."""
    file = part("file", bytes(range(256)) * 1024, '; filename="a.wav"')  # 256 KiB
    form = part("language", "en") + file + MODEL + end()
    hold = Hold()
    model, body = await take_model_part(_held_stream(form, size, hold), B.encode(), 64 << 10)
    assert model == "whisper-1" and isinstance(body, bytearray)
    assert bytes(body) == part("language", "en") + file + end()
    assert len(hold.calls) == 1 and hold.calls[0] >= len(form) - (64 << 10) - 2 * size, "asked before the rest was read"


async def test_model_part_past_the_window_with_the_budget_spent_is_503():
    form = part("file", b"\0" * (128 << 10), '; filename="a.wav"') + MODEL + end()
    with pytest.raises(ProxyError) as e:
        await take_model_part(_held_stream(form, 4096, Hold(busy=True)), B.encode(), 64 << 10)
    assert e.value.status == 503 and "busy" in e.value.message


async def test_form_without_a_model_part_past_the_window_is_read_whole():
    """No model part at all: the whole form comes back (the handler answers 400 unless the path names the Model)."""
    form = part("file", b"\1" * (128 << 10), '; filename="a.wav"') + end()
    hold = Hold()
    model, body = await take_model_part(_held_stream(form, 4096, hold), B.encode(), 64 << 10)
    assert model is None and bytes(body) == form and len(hold.calls) == 1


async def test_take_model_part_of_a_form_without_one():
    form = FILE + end()
    model, body = await take_model_part(_stream(form, 10), B.encode(), 64 << 10)
    assert isinstance(body, StreamBody) and model is None and await _collect(body) == form and body.length == len(form)


def _request(method: str, ctype: bytes | None) -> Request:
    headers = [(b"Content-Type", ctype)] if ctype is not None else []
    return Request(None, method, b"/openai/v1/audio/transcriptions", "1.1", True, headers)


@pytest.mark.parametrize("method, ctype, streams", [
    ("POST", b"multipart/form-data; boundary=abc", True),
    ("POST", b" Multipart/Form-Data ;boundary=abc", True),
    ("POST", b"application/json", False),
    ("POST", None, False),
    ("POST", b"text/plain", False),
    ("PUT", b"multipart/form-data; boundary=abc", False),
])
def test_only_multipart_posts_stream_json_stays_whole(method, ctype, streams):
    """The server asks the handler per request head: a form streams (holding the model-part
    window and one read), JSON is read whole (routing needs its model, PrefixHash its prompt)."""
    handler = ProxyHandler.__new__(ProxyHandler)
    handler.limits = ProxyLimits(multipart_model_window=123)
    assert handler.stream_hold(_request(method, ctype)) == (123 + STREAM_BUFFER if streams else None)
