"""The proxy's limit flags (kaiwo_ctrl/serving/command.py) and their defaults."""

from __future__ import annotations

import argparse

import pytest

from kaiwo_ctrl.serving.command import add_proxy_arguments, proxy_limits
from kaiwo_ctrl.serving.limits import ProxyLimits


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(exit_on_error=False)
    add_proxy_arguments(p)
    return p.parse_args(list(argv))


def test_defaults_are_the_documented_ones(monkeypatch):
    for var in ("PROXY_REQUEST_TIMEOUT", "PROXY_MAX_BODY_SIZE", "PROXY_BODY_MEMORY", "PROXY_ENDPOINT_WAIT_TIMEOUT",
                "PROXY_MULTIPART_MODEL_WINDOW", "PROXY_LINGER_TIMEOUT", "PROXY_MAX_HEADER_COUNT", "PROXY_MAX_PIPELINED",
                "PROXY_MIN_BODY_RATE", "PROXY_BODY_MEMORY_PER_CLIENT"):
        monkeypatch.delenv(var, raising=False)
    lim = proxy_limits(parse())
    assert lim == ProxyLimits()
    assert lim.max_body_bytes >= 25_000_000 + 64 * 1024, "OpenAI's 25 MB audio uploads fit, with their form"
    assert lim.request_timeout == 1800 and lim.endpoint_wait == 600 and lim.head_timeout == 30 and lim.body_idle_timeout == 30
    assert lim.max_upstream_head_bytes == 64 << 10 and lim.body_memory == 512 << 20 and lim.body_memory_wait == 120
    assert lim.multipart_model_window == 1 << 20 and lim.linger_timeout == 2
    assert lim.max_headers == 100 and lim.max_pipelined == 16 and lim.min_body_rate == 8 << 10
    assert lim.body_memory_per_client == 128 << 20


def test_flags_set_every_limit():
    lim = proxy_limits(parse("--proxy-request-timeout", "0", "--proxy-endpoint-wait-timeout", "90s", "--proxy-header-timeout", "5s",
                             "--proxy-body-idle-timeout", "7s", "--proxy-max-body-size", "1Mi", "--proxy-max-header-size", "8Ki",
                             "--proxy-max-upstream-header-size", "16Ki", "--proxy-body-memory", "64Mi",
                             "--proxy-body-memory-wait", "9s", "--proxy-multipart-model-window", "256Ki",
                             "--proxy-linger-timeout", "500ms", "--proxy-max-header-count", "50", "--proxy-max-pipelined", "2",
                             "--proxy-min-body-rate", "0", "--proxy-body-memory-per-client", "16Mi"))
    assert lim == ProxyLimits(head_timeout=5, body_idle_timeout=7, max_head_bytes=8 << 10, max_body_bytes=1 << 20,
                              max_upstream_head_bytes=16 << 10, endpoint_wait=90, request_timeout=None, body_memory=64 << 20,
                              body_memory_wait=9, multipart_model_window=256 << 10, linger_timeout=0.5, max_headers=50,
                              max_pipelined=2, min_body_rate=0, body_memory_per_client=16 << 20)
    assert proxy_limits(parse("--proxy-min-body-rate", "64Ki")).min_body_rate == 64 << 10


def test_the_multipart_model_window_reads_its_environment_variable(monkeypatch):
    monkeypatch.setenv("PROXY_MULTIPART_MODEL_WINDOW", "2Mi")
    assert proxy_limits(parse()).multipart_model_window == 2 << 20
    assert proxy_limits(parse("--proxy-multipart-model-window", "1.5Mi")).multipart_model_window == 3 << 19


@pytest.mark.parametrize("argv", [("--proxy-max-body-size", "lots"), ("--proxy-max-body-size", "0"),
                                  ("--proxy-header-timeout", "0"), ("--proxy-endpoint-wait-timeout", "soon"),
                                  ("--proxy-multipart-model-window", "0"), ("--proxy-multipart-model-window", "1 MiB"),
                                  ("--proxy-linger-timeout", "0"), ("--proxy-max-header-count", "0"),
                                  ("--proxy-max-pipelined", "many"), ("--proxy-body-memory-per-client", "0"),
                                  ("--proxy-min-body-rate", "fast")])
def test_bad_values_are_refused(argv):
    with pytest.raises(argparse.ArgumentError):
        parse(*argv)
