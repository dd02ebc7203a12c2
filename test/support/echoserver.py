"""Local HTTP servers, served from a thread on a loopback address, that stand in
for what a test cannot run:

* :func:`serve_echo` answers every GET with ``<label> saw <path>``: the far end
  of a port-forward in the streaming tests;
* :func:`serve_chat` answers every POST with one OpenAI chat completion whose
  message is a fixed text: a model server behind the proxy, for Pods (kwok's)
  that serve nothing.
"""

from __future__ import annotations

import http.server
import json
import threading


def _start(host: str, port: int, handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve_echo(label: str, port: int = 0) -> http.server.ThreadingHTTPServer:
    """Start the server on 127.0.0.1:``port`` (0: a free one); ``shutdown()`` stops it."""

    class Echo(_Quiet):
        def do_GET(self):
            self.answer(f"{label} saw {self.path}".encode(), "text/plain")

    return _start("127.0.0.1", port, Echo)


def serve_chat(content: str, host: str = "127.0.0.1", port: int = 0) -> http.server.ThreadingHTTPServer:
    """Start a fake model server on ``host``:``port`` (0: a free one) whose every
    POST (the request body is read and ignored) gets a chat completion saying
    ``content``; ``server_address[1]`` is its port, ``shutdown()`` stops it."""
    body = json.dumps({"object": "chat.completion",
                       "choices": [{"message": {"role": "assistant", "content": content}}]}).encode()

    class Chat(_Quiet):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.answer(body, "application/json")

    return _start(host, port, Chat)
