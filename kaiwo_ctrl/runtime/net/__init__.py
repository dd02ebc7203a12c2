"""HTTP and TLS with no Kubernetes in them: the process's one HTTP client, a
lean HTTP/1.1 connection pool (http1, http1response), with bounded requests to
plain URLs on top of it (fetch: scrapes, model Pods, peers); the lean HTTP/1.1
server (http1server, http1conn, http1read, http1answer, http1message, http1budget) on asyncio
protocols and llhttp, sharing header encoding and write flow control
(http1common) and request bodies that stream rather than being held whole
(http1body); and throw-away certificate authorities (certs).

May import (lower layers): objects, process. Never a domain package, nor the
top-level ``api`` models.
"""
