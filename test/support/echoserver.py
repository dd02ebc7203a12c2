"""A local HTTP server that answers every GET with ``<label> saw <path>``: the far end
of a port-forward in the streaming tests. Served from a thread on 127.0.0.1."""

from __future__ import annotations

import http.server
import threading


def serve_echo(label: str, port: int = 0) -> http.server.ThreadingHTTPServer:
    """Start the server on 127.0.0.1:``port`` (0: a free one); ``shutdown()`` stops it."""

    class Echo(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"{label} saw {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
