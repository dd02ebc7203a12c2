#!/usr/bin/env python
"""Benchmark: ``kaiwo-ctrl download`` vs ``aws s3 cp --recursive`` against the same local S3 server.

Starts ``moto_server`` on 127.0.0.1, uploads FILES objects totalling SIZE (default
1 GiB in 64 files), then downloads the prefix with both tools into fresh
directories, alternating the order on every round, and prints the throughput.
Not a test; run it by hand:

    .venv/bin/python bench/download_s3.py [--total-mib 1024] [--files 64] [--parallel 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
MiB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            sys.exit(f"moto_server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except Exception:  # noqa: BLE001
            time.sleep(0.1)
    sys.exit("moto_server did not come up")


def tree_bytes(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total-mib", type=int, default=1024)
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=8, help="kaiwo-ctrl download --parallel")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", default=None, help="where to download (default: a temp dir, removed afterwards)")
    args = ap.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="kaiwo-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    moto = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    creds = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1"}
    try:
        wait_up(endpoint + "/moto-api/", moto)
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench-secret")
        bucket = "bench-bucket"
        s3.create_bucket(Bucket=bucket)
        size = args.total_mib * MiB // args.files
        payload = os.urandom(size)
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: s3.put_object(Bucket=bucket, Key=f"data/part-{i:04d}.bin", Body=payload[i % 251 :] + payload[: i % 251]), range(args.files)))
        total = size * args.files
        print(f"uploaded {args.files} x {size / MiB:.1f} MiB = {total / MiB:.0f} MiB in {time.monotonic() - t0:.1f}s to {endpoint}", flush=True)

        secrets = work / "secrets"
        secrets.mkdir(exist_ok=True)
        (secrets / "id").write_text("bench")
        (secrets / "key").write_text("bench-secret")
        cfg = work / "config.json"
        cfg.write_text(
            json.dumps(
                {
                    "s3": [
                        {
                            "endpointUrl": endpoint,
                            "accessKeyId": {"file": str(secrets / "id")},
                            "secretKey": {"file": str(secrets / "key")},
                            "buckets": [{"name": bucket, "folders": [{"path": "data/", "targetPath": "out"}]}],
                        }
                    ]
                }
            )
        )

        def run_kaiwo(dest: Path) -> float:
            t = time.monotonic()
            proc = subprocess.run(
                [str(BIN / "python"), "-m", "kaiwo_ctrl.download", "--config", str(cfg), "--data-dir", str(dest), "--parallel", str(args.parallel), "--log-level", "WARNING"],
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            took = time.monotonic() - t
            if proc.returncode != 0:
                sys.exit(f"kaiwo-ctrl download failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
            return took

        def run_aws(dest: Path) -> float:
            t = time.monotonic()
            proc = subprocess.run(
                [str(BIN / "aws"), "s3", "cp", "--recursive", "--only-show-errors", "--endpoint-url", endpoint, f"s3://{bucket}/data/", str(dest / "out")],
                env={**os.environ, **creds},
                capture_output=True,
                text=True,
            )
            took = time.monotonic() - t
            if proc.returncode != 0:
                sys.exit(f"aws s3 cp failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
            return took

        results: dict[str, list[float]] = {"kaiwo-ctrl download": [], "aws s3 cp --recursive": []}
        runners = [("kaiwo-ctrl download", run_kaiwo), ("aws s3 cp --recursive", run_aws)]
        for rnd in range(args.rounds):
            order = runners if rnd % 2 == 0 else runners[::-1]
            for name, fn in order:
                dest = work / f"dl-{rnd}-{name.split()[0]}"
                shutil.rmtree(dest, ignore_errors=True)
                took = fn(dest)
                n, got = tree_bytes(dest / "out")
                if n != args.files or got != total:
                    sys.exit(f"{name}: expected {args.files} files / {total} bytes, got {n} / {got}")
                results[name].append(took)
                print(f"round {rnd + 1}: {name:24s} {took:7.2f}s  {total / MiB / took:8.1f} MiB/s", flush=True)
                shutil.rmtree(dest, ignore_errors=True)

        print()
        print(f"{'tool':24s} {'best s':>8s} {'best MiB/s':>11s} {'mean MiB/s':>11s}   ({args.files} files, {total / MiB:.0f} MiB, loopback moto_server)")
        for name, times in results.items():
            mean_rate = sum(total / MiB / t for t in times) / len(times)
            print(f"{name:24s} {min(times):8.2f} {total / MiB / min(times):11.1f} {mean_rate:11.1f}")
        print(f"(kaiwo-ctrl --parallel {args.parallel}; awscli defaults: max_concurrent_requests=10)")
    finally:
        moto.terminate()
        try:
            moto.wait(timeout=10)
        except subprocess.TimeoutExpired:
            moto.kill()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
