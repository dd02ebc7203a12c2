"""Local servers for the download tests. Everything listens on 127.0.0.1 and is
started and stopped by the tests themselves."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import select
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = REPO_ROOT / ".venv" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server process exited with {proc.returncode} before answering {url}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answered
        except Exception as exc:  # noqa: BLE001
            last = exc
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up within {timeout}s: {last}")


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class BackgroundHTTPServer:
    """ThreadingHTTPServer on a free loopback port, served from a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> BackgroundHTTPServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --------------------------------------------------------------------------- S3 (moto)


class MotoS3:
    """``moto_server`` in its own process, with IAM authentication switched on
    after setup, so wrong keys are really rejected."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_http(self.endpoint + "/moto-api/", proc=self.proc)
        import boto3

        kw = dict(endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
        iam = boto3.client("iam", **kw)
        iam.create_user(UserName="downloader")
        iam.put_user_policy(
            UserName="downloader",
            PolicyName="all",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}),
        )
        key = iam.create_access_key(UserName="downloader")["AccessKey"]
        self.access_key_id = key["AccessKeyId"]
        self.secret_access_key = key["SecretAccessKey"]
        req = urllib.request.Request(
            self.endpoint + "/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
        )
        urllib.request.urlopen(req).read()
        self.client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
        )

    def stop(self) -> None:
        stop_process(self.proc)


# --------------------------------------------------------------------------- TCP relay


class TcpRelay:
    """A TCP forwarder in front of a server, which the test can throttle and
    kill: ``kill()`` stops listening and drops every open connection, exactly
    what a client sees when the server dies mid-transfer."""

    def __init__(self, target_port: int, *, bytes_per_second: int | None = None, port: int = 0) -> None:
        self.target_port = target_port
        self.bytes_per_second = bytes_per_second
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.downstream_bytes = 0
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._dead = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._dead:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        socks = [client, upstream]
        try:
            while not self._dead:
                readable, _, _ = select.select(socks, [], [], 0.2)
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is upstream:
                        if self.bytes_per_second:
                            # Send in slices so the rate is steady.
                            for i in range(0, len(data), 8192):
                                if self._dead:
                                    return
                                piece = data[i : i + 8192]
                                client.sendall(piece)
                                with self._lock:
                                    self.downstream_bytes += len(piece)
                                time.sleep(len(piece) / self.bytes_per_second)
                        else:
                            client.sendall(data)
                            with self._lock:
                                self.downstream_bytes += len(data)
                    else:
                        upstream.sendall(data)
        except OSError:
            return
        finally:
            for s in socks:
                try:
                    s.close()
                except OSError:
                    pass

    def kill(self) -> None:
        self._dead = True
        try:
            self.listener.close()
        except OSError:
            pass
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                c.close()
            except OSError:
                pass


# --------------------------------------------------------------------------- Git over HTTP


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            size_line = handler.rfile.readline().strip()
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                handler.rfile.readline()
                return bytes(out)
            out += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def make_git_http_server(project_root: Path, *, users: dict[str, str], private_prefix: str = "/private/") -> BackgroundHTTPServer:
    """Serve ``project_root`` through ``git http-backend`` (smart HTTP) run as
    CGI. Repositories under ``private_prefix`` need HTTP Basic auth with one of
    ``users`` (name -> password). Every Authorization header seen is recorded in
    ``server.seen_auth`` so tests can check what the client sent."""

    seen_auth: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args):  # quiet
            pass

        def _cgi(self) -> None:
            parts = urlsplit(self.path)
            path_info = unquote(parts.path)
            user = ""
            if path_info.startswith(private_prefix):
                auth = self.headers.get("Authorization", "")
                if auth:
                    seen_auth.append(auth)
                ok = False
                if auth.startswith("Basic "):
                    try:
                        name, _, pw = base64.b64decode(auth[6:]).decode().partition(":")
                        ok = users.get(name) == pw
                        user = name
                    except Exception:  # noqa: BLE001
                        ok = False
                if not ok:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="kaiwo-test"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            body = _read_body(self) if self.command == "POST" else b""
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": str(project_root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path_info,
                "QUERY_STRING": parts.query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": "127.0.0.1",
                "REMOTE_USER": user,
                "SERVER_PROTOCOL": "HTTP/1.0",
            }
            if self.headers.get("Content-Encoding"):
                env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
            if self.headers.get("Git-Protocol"):
                env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
            head, _, payload = proc.stdout.partition(b"\r\n\r\n")
            if not _:
                head, _, payload = proc.stdout.partition(b"\n\n")
            status = 200
            headers = []
            for line in head.decode("latin-1").splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                elif name:
                    headers.append((name.strip(), value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = _cgi
        do_POST = _cgi

    server = BackgroundHTTPServer(Handler)
    server.seen_auth = seen_auth  # type: ignore[attr-defined]
    return server


# --------------------------------------------------------------------------- Hugging Face Hub


class HubRepo:
    def __init__(self, repo_id: str, files: dict[str, bytes], *, token: str | None = None) -> None:
        self.repo_id = repo_id
        self.files = files
        self.token = token
        self.sha = hashlib.sha1((repo_id + "".join(sorted(files))).encode()).hexdigest()


def make_hf_server(repos: list[HubRepo]) -> BackgroundHTTPServer:
    """A minimal Hub: repo info, recursive tree listing and file resolve
    (HEAD/GET with X-Repo-Commit, ETag and size headers, Range support), with
    the X-Error-Code headers huggingface_hub uses to tell errors apart.
    Private repos (``token`` set) need ``Authorization: Bearer <token>``."""

    by_id = {r.repo_id: r for r in repos}
    requests_seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, head_only: bool = False) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if "Content-Length" not in (headers or {}):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head_only and body:
                self.wfile.write(body)

        def _json(self, status: int, doc, extra: dict[str, str] | None = None, head_only: bool = False) -> None:
            body = json.dumps(doc).encode()
            h = {"Content-Type": "application/json"}
            h.update(extra or {})
            self._send(status, body, h, head_only)

        def _error(self, status: int, code: str, msg: str, head_only: bool = False) -> None:
            self._json(status, {"error": msg}, {"X-Error-Code": code, "X-Error-Message": msg}, head_only)

        def _repo(self, repo_id: str, head_only: bool = False) -> HubRepo | None:
            repo = by_id.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found", head_only)
                return None
            if repo.token is not None and self.headers.get("Authorization") != f"Bearer {repo.token}":
                self._error(401, "RepoNotFound", "Invalid credentials in Authorization header", head_only)
                return None
            return repo

        def _handle(self, head_only: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            requests_seen.append(f"{self.command} {path}")
            segs = path.strip("/").split("/")
            # /api/models/{org}/{name}/revision/{rev}  and  /api/models/{org}/{name}/tree/{rev}[/...]
            if len(segs) >= 6 and segs[0] == "api" and segs[1] == "models":
                repo = self._repo(f"{segs[2]}/{segs[3]}", head_only)
                if repo is None:
                    return
                if segs[5] not in ("main", repo.sha):
                    self._error(404, "RevisionNotFound", "Invalid rev id", head_only)
                    return
                if segs[4] == "revision":
                    self._json(
                        200,
                        {
                            "id": repo.repo_id,
                            "modelId": repo.repo_id,
                            "sha": repo.sha,
                            "private": repo.token is not None,
                            "siblings": [{"rfilename": f} for f in sorted(repo.files)],
                        },
                        head_only=head_only,
                    )
                    return
                if segs[4] == "tree":
                    entries = [
                        {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": name}
                        for name, data in sorted(repo.files.items())
                    ]
                    self._json(200, entries, head_only=head_only)
                    return
            # /{org}/{name}/resolve/{rev}/{file...}
            if len(segs) >= 5 and segs[2] == "resolve":
                repo = self._repo(f"{segs[0]}/{segs[1]}", head_only)
                if repo is None:
                    return
                if segs[3] not in ("main", repo.sha):
                    self._error(404, "RevisionNotFound", "Invalid rev id", head_only)
                    return
                name = "/".join(segs[4:])
                data = repo.files.get(name)
                if data is None:
                    self._error(404, "EntryNotFound", f"{name} does not exist", head_only)
                    return
                etag = hashlib.sha256(data).hexdigest()
                headers = {
                    "X-Repo-Commit": repo.sha,
                    "ETag": f'"{etag}"',
                    "Content-Type": "application/octet-stream",
                    "Accept-Ranges": "bytes",
                }
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and not head_only:
                    start = int(rng[6:].split("-")[0] or 0)
                    part = data[start:]
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                    self._send(206, part, headers)
                    return
                headers["Content-Length"] = str(len(data))
                self.send_response(200)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if not head_only:
                    self.wfile.write(data)
                return
            self._error(404, "NotFound", "unknown route", head_only)

        def do_GET(self):
            self._handle(False)

        def do_HEAD(self):
            self._handle(True)

    server = BackgroundHTTPServer(Handler)
    server.requests_seen = requests_seen  # type: ignore[attr-defined]
    return server


# --------------------------------------------------------------------------- GCS


def make_token_server(public_key_pem: bytes) -> BackgroundHTTPServer:
    """An OAuth2 token endpoint for service-account JWT-bearer grants. It checks
    the assertion's RS256 signature against ``public_key_pem`` and answers
    ``invalid_grant`` otherwise, like Google's endpoint does for a wrong key."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    public_key = serialization.load_pem_public_key(public_key_pem)
    grants: list[str] = []

    def b64d(s: str) -> bytes:
        return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode())
            assertion = (form.get("assertion") or [""])[0]
            ok = False
            try:
                head, payload, sig = assertion.split(".")
                public_key.verify(b64d(sig), f"{head}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
                ok = True
            except Exception:  # noqa: BLE001
                ok = False
            if ok:
                grants.append(json.loads(b64d(payload)).get("iss", ""))
                body = json.dumps({"access_token": "ya29.local-test-token", "expires_in": 3600, "token_type": "Bearer"})
                status = 200
            else:
                body = json.dumps({"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
                status = 400
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = BackgroundHTTPServer(Handler)
    server.grants = grants  # type: ignore[attr-defined]
    return server


def service_account_json(token_uri: str, private_key_pem: str, email: str = "downloader@kaiwo-test.iam.gserviceaccount.com") -> str:
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "kaiwo-test",
            "private_key_id": "0123456789abcdef",
            "private_key": private_key_pem,
            "client_email": email,
            "client_id": "1234567890",
            "token_uri": token_uri,
        }
    )


def rsa_key_pair() -> tuple[str, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private_pem, public_pem


class GcsEmulator:
    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "gcp-storage-emulator"), "start", "--host", "127.0.0.1", "--port", str(self.port), "--in-memory"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_http(self.endpoint + "/storage/v1/b", proc=self.proc)

    def client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="kaiwo-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": self.endpoint}
        )

    def stop(self) -> None:
        stop_process(self.proc)


# --------------------------------------------------------------------------- Azure (Azurite)

AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's documented development-account key (public, emulator only).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> Path:
    """Run the idempotent setup script and return the azurite-blob path.
    Raises with the script's output when the install is impossible."""
    script = REPO_ROOT / "hack" / "setup-download-emulators.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    path = Path(proc.stdout.strip().splitlines()[-1])
    if not path.exists():
        raise RuntimeError(f"{script} reported {path}, which does not exist")
    return path


class Azurite:
    def __init__(self, workdir: Path) -> None:
        binary = azurite_binary()
        if shutil.which("node") is None:
            raise RuntimeError("node is not on PATH; Azurite needs it")
        self.port = free_port()
        self.blob_endpoint = f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                str(binary),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--inMemoryPersistence",
                "--skipApiVersionCheck",
                "--silent",
            ],
            cwd=str(workdir),
            stdout=subprocess.DEVNULL,
            stderr=open(workdir / "azurite.stderr", "wb"),  # noqa: SIM115 - kept for the process lifetime
        )
        try:
            wait_http(f"http://127.0.0.1:{self.port}/", proc=self.proc)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {(workdir / 'azurite.stderr').read_text(errors='replace')}") from None

    def connection_string(self, key: str = AZURITE_KEY) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    def stop(self) -> None:
        # In-memory only, nothing to flush; Azurite takes ~10 s to honour SIGTERM.
        stop_process(self.proc, grace=2.0)
