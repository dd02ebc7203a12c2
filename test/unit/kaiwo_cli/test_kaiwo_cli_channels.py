"""kaiwo exec / port-forward: the WebSocket channel framing, resize and exit-status messages."""

from __future__ import annotations

import json

import pytest

from kaiwo_ctrl.kaiwo_cli import channels as ch
from kaiwo_ctrl.kaiwo_cli.cmd_port_forward import parse_ports
from kaiwo_ctrl.kaiwo_cli.errors import USAGE, CliError
from kaiwo_ctrl.kaiwo_cli.streams import exec_query


def test_frames_put_the_channel_byte_first_and_parse_back():
    assert ch.frame(ch.STDIN, b"ls\n") == b"\x00ls\n"
    assert ch.parse(b"\x01hello") == (ch.STDOUT, b"hello")
    assert ch.parse(b"\x02") == (ch.STDERR, b"")
    for channel in (0, 1, 2, 3, 4, 255):
        assert ch.parse(ch.frame(channel, b"\xff\x00x")) == (channel, b"\xff\x00x")


def test_bad_frames_are_refused():
    with pytest.raises(ch.ChannelError, match="empty"):
        ch.parse(b"")
    with pytest.raises(ch.ChannelError, match="unexpected channel 7"):
        ch.parse(b"\x07data", frozenset({0, 1}))
    with pytest.raises(ch.ChannelError):
        ch.frame(256)


def test_v5_close_names_stdin():
    assert ch.close_stdin() == b"\xff\x00"


def test_resize_is_a_json_size_on_channel_4_clamped_to_uint16():
    msg = ch.resize(120, 40)
    assert msg[0] == ch.RESIZE and json.loads(msg[1:]) == {"Width": 120, "Height": 40}
    assert json.loads(ch.resize(-5, 10**6)[1:]) == {"Width": 0, "Height": 65535}


@pytest.mark.parametrize("status, code", [
    (b'{"metadata":{},"status":"Success"}', 0),
    (b"", 0),
    (json.dumps({"status": "Failure", "reason": "NonZeroExitCode", "message": "command terminated with non-zero exit code",
                 "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}).encode(), 3),
    (json.dumps({"status": "Failure", "reason": "NonZeroExitCode",
                 "details": {"causes": [{"reason": "ExitCode", "message": "300"}]}}).encode(), 255),
    # kwok's simulated kubelet: the exit as an internal error in os/exec's words
    (json.dumps({"status": "Failure", "reason": "InternalError", "message": "Internal error occurred: error executing "
                 "command in container: cmd wait: sh -c exit 3: exit status 3"}).encode(), 3),
])
def test_exit_code_comes_from_the_status(status, code):
    assert ch.exit_code(status) == code


@pytest.mark.parametrize("status, message", [
    (json.dumps({"status": "Failure", "reason": "InternalError", "message": "executable file not found"}).encode(),
     "executable file not found"),
    (json.dumps({"status": "Failure", "reason": "NonZeroExitCode",
                 "details": {"causes": [{"reason": "ExitCode", "message": "x"}]}}).encode(), "NonZeroExitCode"),
    (b"not json", "not json"),
    (json.dumps({"status": "Failure", "reason": "InternalError", "message": "cmd start: exec: no such file"}).encode(),
     "no such file"),
    (json.dumps({"status": "Failure", "reason": "Forbidden", "message": "x: exit status 3"}).encode(), "exit status 3"),
    (b"[1, 2]", "unexpected status"),
])
def test_a_failure_without_an_exit_code_is_an_exec_failure(status, message):
    with pytest.raises(ch.ExecFailure, match=message):
        ch.exit_code(status)


def test_port_forward_channels_open_with_the_little_endian_port():
    assert ch.port_prefix(b"\x90\x1fHTTP/1.1") == (8080, b"HTTP/1.1")
    assert ch.port_prefix(b"\x50\x00") == (80, b"")
    with pytest.raises(ch.ChannelError, match="2-byte port"):
        ch.port_prefix(b"\x50")


def test_exec_query_repeats_command_and_merges_stderr_under_a_tty():
    assert exec_query("main", ["sh", "-c", "exit 3"], stdin=False, tty=False) == [
        ("container", "main"), ("command", "sh"), ("command", "-c"), ("command", "exit 3"),
        ("stdout", "true"), ("stderr", "true")]
    q = exec_query("main", ["bash"], stdin=True, tty=True)
    assert ("tty", "true") in q and ("stdin", "true") in q and ("stderr", "true") not in q


def test_port_specs():
    assert parse_ports(["8000", "18000:8000", ":8888", "0:80"]) == [(8000, 8000), (18000, 8000), (0, 8888), (0, 80)]
    for bad in ("x", "8000:", "70000", "1:0"):
        with pytest.raises(CliError) as e:
            parse_ports([bad])
        assert e.value.code == USAGE


def test_exec_command_after_double_dash_keeps_its_own_options():
    from kaiwo_ctrl.kaiwo_cli.cmd_exec import split_command

    assert split_command(["exec", "x", "-i", "--", "sh", "-c", "cat -- f", "--", "-n"]) == (
        ["exec", "x", "-i"], ["sh", "-c", "cat -- f", "--", "-n"])
    assert split_command(["exec", "x", "--command", "grep", "--", "-v"]) == (
        ["exec", "x", "--command", "grep", "--", "-v"], [])
    assert split_command(["logs", "x", "--", "y"]) == (["logs", "x", "--", "y"], [])
