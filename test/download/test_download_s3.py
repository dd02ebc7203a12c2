"""S3 downloads against a real moto_server (IAM auth on) on 127.0.0.1."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
import uuid

from conftest import downloader_cmd, parse_events
from dl_servers import TcpRelay

MiB = 1024 * 1024


def _bucket(s3_server, objects: dict[str, bytes]) -> str:
    name = f"b-{uuid.uuid4().hex[:12]}"
    s3_server.client.create_bucket(Bucket=name)
    for key, body in objects.items():
        s3_server.client.put_object(Bucket=name, Key=key, Body=body)
    return name


def _item(endpoint, secret_file, s3_server, buckets, *, secret=None):
    return {
        "endpointUrl": endpoint,
        "accessKeyId": secret_file("s3-id", s3_server.access_key_id),
        "secretKey": secret_file("s3-secret", secret if secret is not None else s3_server.secret_access_key),
        "buckets": buckets,
    }


def test_files_folders_glob_then_skip(s3_server, run_download, secret_file, tmp_path):
    objs = {
        "models/model.bin": os.urandom(3 * MiB + 17),
        "data/images/a.jpg": b"jpeg-a",
        "data/images/b.png": b"png-b",
        "data/images/deep/c.jpg": b"jpeg-c",
        "data/imagesX/not-me.jpg": b"outside the prefix",
    }
    bucket = _bucket(s3_server, objs)
    cfg = {
        "s3": [
            _item(
                s3_server.endpoint,
                secret_file,
                s3_server,
                [
                    {
                        "name": bucket,
                        "files": [{"path": "models/model.bin", "targetPath": "weights/m.bin"}],
                        "folders": [
                            {"path": "data/images", "targetPath": "all-images"},
                            {"path": "data/images/", "targetPath": "jpgs", "glob": "*.jpg"},
                        ],
                    }
                ],
            )
        ]
    }
    data = tmp_path / "data"
    r = run_download(cfg, data_dir=data)
    assert r.code == 0, r.stderr
    assert (data / "weights/m.bin").read_bytes() == objs["models/model.bin"]
    assert sorted(p.relative_to(data / "all-images").as_posix() for p in (data / "all-images").rglob("*") if p.is_file()) == [
        "a.jpg",
        "b.png",
        "deep/c.jpg",
    ]
    assert (data / "all-images/deep/c.jpg").read_bytes() == b"jpeg-c"
    assert sorted(p.relative_to(data / "jpgs").as_posix() for p in (data / "jpgs").rglob("*") if p.is_file()) == ["a.jpg", "deep/c.jpg"]
    # No temporary names left behind.
    assert not [p for p in data.rglob("*") if ".kaiwo-partial-" in p.name]
    done = {e["file"]: e for e in r.by_event("file_done")}
    assert done["models/model.bin"]["bytes"] == len(objs["models/model.bin"])
    assert done["models/model.bin"]["rate_bps"] > 0 and "rate" in done["models/model.bin"]
    assert r.by_event("done")
    # The secret never shows up in the logs.
    assert s3_server.secret_access_key not in r.stderr

    # Second run: everything present with the same size is skipped, nothing fetched.
    r2 = run_download(cfg, data_dir=data)
    assert r2.code == 0, r2.stderr
    assert not r2.by_event("file_done")
    assert len(r2.by_event("file_skipped")) == 6

    # A file with the wrong size is fetched again and replaced.
    (data / "weights/m.bin").write_bytes(b"truncated")
    r3 = run_download(cfg, data_dir=data)
    assert r3.code == 0, r3.stderr
    assert [e["file"] for e in r3.by_event("file_done")] == ["models/model.bin"]
    assert (data / "weights/m.bin").read_bytes() == objs["models/model.bin"]


def test_wrong_secret_key_is_auth_failure(s3_server, run_download, secret_file, tmp_path):
    bucket = _bucket(s3_server, {"x.txt": b"x"})
    wrong = "WrongSecretValue/abcdefghijklmnop1234"
    cfg = {"s3": [_item(s3_server.endpoint, secret_file, s3_server, [{"name": bucket, "files": [{"path": "x.txt", "targetPath": "x.txt"}]}], secret=wrong)]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 3, r.stderr
    assert r.failed["kind"] == "auth"
    assert bucket in r.failed["item"] and "x.txt" in r.failed["item"]
    assert "credentials rejected" in r.failed["error"]
    assert wrong not in r.stderr
    assert not (tmp_path / "d" / "x.txt").exists()
    # The Secret is fixed; the re-run completes.
    secret_file("s3-secret", s3_server.secret_access_key)
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 0, r.stderr
    assert (tmp_path / "d" / "x.txt").read_bytes() == b"x"


def test_unknown_access_key_is_auth_failure(s3_server, run_download, secret_file, tmp_path):
    bucket = _bucket(s3_server, {"x.txt": b"x"})
    cfg = {
        "s3": [
            {
                "endpointUrl": s3_server.endpoint,
                "accessKeyId": secret_file("id2", "AKIAUNKNOWNKEY000001"),
                "secretKey": secret_file("sk2", "whatever-secret-value"),
                "buckets": [{"name": bucket, "folders": [{"path": "", "targetPath": "all"}]}],
            }
        ]
    }
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 3, r.stderr
    assert "whatever-secret-value" not in r.stderr


def test_missing_object_and_missing_bucket(s3_server, run_download, secret_file, tmp_path):
    bucket = _bucket(s3_server, {"present.txt": b"p"})
    cfg = {"s3": [_item(s3_server.endpoint, secret_file, s3_server, [{"name": bucket, "files": [{"path": "absent.txt", "targetPath": "a.txt"}]}])]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 4, r.stderr
    assert r.failed["kind"] == "not_found"
    assert "absent.txt" in r.failed["item"] and "absent.txt" in r.failed["error"]
    # The object is uploaded; the re-run completes.
    s3_server.client.put_object(Bucket=bucket, Key="absent.txt", Body=b"now here")
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 0, r.stderr
    assert (tmp_path / "d" / "a.txt").read_bytes() == b"now here"

    cfg = {"s3": [_item(s3_server.endpoint, secret_file, s3_server, [{"name": "no-such-bucket-kaiwo", "files": [{"path": "a", "targetPath": "a"}]}])]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 4, r.stderr
    assert "no-such-bucket-kaiwo" in r.failed["error"] and "does not exist" in r.failed["error"]

    cfg = {"s3": [_item(s3_server.endpoint, secret_file, s3_server, [{"name": "no-such-bucket-kaiwo", "folders": [{"path": "x/", "targetPath": "x"}]}])]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 4, r.stderr

    cfg = {"s3": [_item(s3_server.endpoint, secret_file, s3_server, [{"name": bucket, "folders": [{"path": "empty/", "targetPath": "x"}]}])]}
    r = run_download(cfg, data_dir=tmp_path / "d")
    assert r.code == 4, r.stderr
    assert "no objects under prefix" in r.failed["error"]


def test_server_killed_mid_file_then_rerun_completes(s3_server, run_download, secret_file, tmp_path):
    body = os.urandom(12 * MiB)
    bucket = _bucket(s3_server, {"big/blob.bin": body, "big/small.txt": b"small"})
    relay = TcpRelay(s3_server.port, bytes_per_second=3 * MiB)
    cfg = {"s3": [_item(relay.endpoint, secret_file, s3_server, [{"name": bucket, "files": [{"path": "big/blob.bin", "targetPath": "out/blob.bin"}]}])]}
    cfg_path = tmp_path / "interrupt.yaml"
    import json

    cfg_path.write_text(json.dumps(cfg))
    data = tmp_path / "data"
    proc = subprocess.Popen(downloader_cmd(cfg_path, data, extra=["--secrets-dir", str(tmp_path / "secrets")]), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while relay.downstream_bytes < 2 * MiB and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert relay.downstream_bytes >= 2 * MiB, "transfer never started"
    relay.kill()  # the server goes away mid-file
    _, stderr = proc.communicate(timeout=120)
    events = parse_events(stderr)
    assert proc.returncode == 5, stderr
    failed = [e for e in events if e["event"] == "failed"][-1]
    assert failed["kind"] == "transient"
    assert "big/blob.bin" in failed["item"]
    assert "gave up after 3 attempts" in failed["error"]
    assert [e for e in events if e["event"] == "retry"], "no retries were logged"
    progress = [e for e in events if e["event"] == "progress"]
    assert progress, "no progress lines during a throttled transfer"
    assert progress[0]["file"] == "big/blob.bin" and progress[0]["total"] == len(body)
    assert 0 < progress[0]["bytes"] <= len(body) and progress[0]["rate_bps"] > 0 and progress[0]["rate"].endswith("/s")
    # Nothing that looks complete, and no temporary file either.
    assert not (data / "out/blob.bin").exists()
    if (data / "out").exists():
        assert not list((data / "out").iterdir())

    # The server is back (same address): the re-run completes.
    relay2 = TcpRelay(s3_server.port, port=relay.port)
    try:
        r = run_download(cfg, data_dir=data)
    finally:
        relay2.kill()
    assert r.code == 0, r.stderr
    assert hashlib.sha256((data / "out/blob.bin").read_bytes()).digest() == hashlib.sha256(body).digest()


def test_downloader_killed_mid_file_leaves_no_complete_looking_file(s3_server, run_download, secret_file, tmp_path):
    body = os.urandom(8 * MiB)
    bucket = _bucket(s3_server, {"blob.bin": body})
    relay = TcpRelay(s3_server.port, bytes_per_second=2 * MiB)
    cfg = {"s3": [_item(relay.endpoint, secret_file, s3_server, [{"name": bucket, "files": [{"path": "blob.bin", "targetPath": "blob.bin"}]}])]}
    import json

    cfg_path = tmp_path / "k.yaml"
    cfg_path.write_text(json.dumps(cfg))
    data = tmp_path / "data"
    proc = subprocess.Popen(downloader_cmd(cfg_path, data, extra=["--secrets-dir", str(tmp_path / "secrets")]), stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            partial = [p for p in data.glob(".*") if ".kaiwo-partial-" in p.name] if data.exists() else []
            if partial and relay.downstream_bytes > 2 * MiB:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # the Job's pod is killed mid-file
        proc.wait(timeout=30)
        assert not (data / "blob.bin").exists()
        leftovers = [p for p in data.iterdir() if ".kaiwo-partial-" in p.name]
        assert leftovers, "expected the partial download under its temporary name"
        relay.bytes_per_second = None
        r = run_download(cfg, data_dir=data)
    finally:
        relay.kill()
    assert r.code == 0, r.stderr
    assert (data / "blob.bin").read_bytes() == body
    assert [p.name for p in data.iterdir()] == ["blob.bin"]


def test_parallel_many_files(s3_server, run_download, secret_file, tmp_path):
    objs = {f"many/f{i:03d}.bin": os.urandom(64 * 1024 + i) for i in range(40)}
    bucket = _bucket(s3_server, objs)
    cfg = {"s3": [_item(s3_server.endpoint, secret_file, s3_server, [{"name": bucket, "folders": [{"path": "many", "targetPath": "m"}]}])]}
    r = run_download(cfg, data_dir=tmp_path / "d", extra=["--parallel", "4"])
    assert r.code == 0, r.stderr
    for key, body in objs.items():
        assert (tmp_path / "d/m" / key.split("/", 1)[1]).read_bytes() == body
    assert len(r.by_event("file_done")) == 40


def test_unauthenticated_s3_when_no_secret_is_named(run_download, tmp_path):
    """No accessKeyId/secretKey: requests go out unsigned (a public bucket).
    Uses an in-process ThreadedMotoServer, which has IAM auth off."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        c = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
        c.create_bucket(Bucket="public-data")
        c.put_object(Bucket="public-data", Key="open/readme.txt", Body=b"public", ACL="public-read")
        env = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_PROFILE": None}
        r = run_download({"s3": [{"endpointUrl": endpoint, "buckets": [{"name": "public-data", "folders": [{"path": "open", "targetPath": "o"}]}]}]}, data_dir=tmp_path / "d", env=env)
    finally:
        server.stop()
    assert r.code == 0, r.stderr
    assert (tmp_path / "d/o/readme.txt").read_bytes() == b"public"
