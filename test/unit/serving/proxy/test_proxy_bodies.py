"""What the proxy does to request bodies (kaiwo_ctrl/serving/proxy/handler.py): the
multipart ``model`` part taken out in one copy, wherever it is in the form."""

from __future__ import annotations

import pytest

from kaiwo_ctrl.serving.proxy.handler import split_multipart_model

B = "XyZ"


def part(name: str, content: str, extra: str = "") -> str:
    return f'--{B}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n{content}\r\n'


FILE = part("file", "RIFF....", '; filename="a.wav"')
END = f"--{B}--\r\n"


@pytest.mark.parametrize("form, model, rest", [
    (part("model", "whisper") + FILE + END, "whisper", FILE + END),
    (FILE + part("model", " whisper ") + END, "whisper", FILE + END),
    (FILE + part("language", "en") + part("model", "w") + END, "w", FILE + part("language", "en") + END),
    (FILE + END, None, FILE + END),
    (part("model", "first") + part("model", "second") + END, "first", part("model", "second") + END),
    (FILE + END + part("model", "after-the-end"), None, FILE + END + part("model", "after-the-end")),
    ("", None, ""),
])
def test_model_part_is_taken_out(form, model, rest):
    got_model, got_rest = split_multipart_model(bytearray(form.encode()), B)
    assert got_model == model and bytes(got_rest) == rest.encode()


def test_a_file_part_named_like_the_model_field_is_not_the_model():
    form = part("file", "model", '; filename="model"') + part("model", "w") + END
    assert split_multipart_model(form.encode(), B) == ("w", (part("file", "model", '; filename="model"') + END).encode())
