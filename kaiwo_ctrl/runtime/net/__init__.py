"""HTTP and TLS with no Kubernetes in them: a lean HTTP/1.1 client pool (http1,
http1response) and server (http1server) on asyncio protocols and llhttp,
sharing header encoding and write flow control (http1common), and throw-away
certificate authorities (certs).

May import (lower layers): objects, process. Never a domain package, nor the
top-level ``api`` models.
"""
