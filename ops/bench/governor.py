"""The governor proxy's cost: latency it adds, and streaming requests per second.

The fake upstream and `tickwork governor` each run in their own process, as deployed;
the client is this process. Latency: sequential chat completions of a tool-dense
conversation (~12k characters, so every request is measured, calibrated and booked),
alternating direct and through the proxy, p50/p99 of each and the difference.
Throughput: 50 concurrent clients streaming completions for a fixed time, through the
proxy and directly.

    .venv/bin/python ops/bench/governor.py [--requests 1000] [--seconds 20] [--clients 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from machine import describe

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.corpus import session

TICKWORK = str(Path(sys.executable).with_name("tickwork"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(
    command: list[str], cwd: Path, env: dict[str, str], ready: str
) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(ready, timeout=1)
            return process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{command} did not start")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def latencies(direct: str, proxy: str, body: dict[str, Any], count: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {"direct": [], "proxy": []}
    with httpx.Client(timeout=30) as http:
        for index in range(count + 20):
            for name, origin in (("direct", direct), ("proxy", proxy)):
                began = time.perf_counter()
                http.post(f"{origin}/v1/chat/completions", json=body).raise_for_status()
                if index >= 20:  # warm-up
                    timings[name].append((time.perf_counter() - began) * 1000)
    return timings


async def streaming_rate(
    origin: str, body: dict[str, Any], clients: int, seconds: float
) -> tuple[float, int]:
    """Completed streams per second, and how many failed (a refused or cut connection)."""
    done = failed = 0
    stop_at = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:

        async def client() -> None:
            nonlocal done, failed
            url = f"{origin}/v1/chat/completions"
            while time.monotonic() < stop_at:
                try:
                    async with http.stream("POST", url, json=body) as answer:
                        async for _ in answer.aiter_raw():
                            pass
                    done += answer.is_success
                except httpx.TransportError:
                    failed += 1

        await asyncio.gather(*(client() for _ in range(clients)))
    return done / seconds, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=50)
    args = parser.parse_args()
    print(describe())
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    body = session(7, 6)[-1]
    stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TICKWORK_", "GOV_"))}
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        fake_port, proxy_port = free_port(), free_port()
        direct = f"http://127.0.0.1:{fake_port}"
        proxy = f"http://127.0.0.1:{proxy_port}"
        fake = start(
            [TICKWORK, "fake-llm", "--port", str(fake_port)], cwd, env, f"{direct}/v1/models"
        )
        governor_env = {**env, "GOV_UPSTREAM": direct, "GOV_PORT": str(proxy_port)}
        governor = start([TICKWORK, "governor"], cwd, governor_env, f"{proxy}/governor/status")
        try:
            print(
                f"request: {len(str(body)):,} characters, {len(body['messages'])} messages, tools"
            )
            timings = latencies(direct, proxy, body, args.requests)
            for name, values in timings.items():
                print(
                    f"{name:6} p50 {statistics.median(values):.2f} ms  "
                    f"p99 {percentile(values, 0.99):.2f} ms  ({len(values)} requests)"
                )
            added50 = statistics.median(timings["proxy"]) - statistics.median(timings["direct"])
            added99 = percentile(timings["proxy"], 0.99) - percentile(timings["direct"], 0.99)
            print(f"added  p50 {added50:.2f} ms  p99 {added99:.2f} ms  (target p50 <= 2 ms)")
            for name, origin in (("direct", direct), ("proxy", proxy)):
                rate, failed = asyncio.run(
                    streaming_rate(origin, stream_body, args.clients, args.seconds)
                )
                print(
                    f"{name:6} {rate:,.0f} streaming requests/s with {args.clients} clients "
                    f"({failed} failed)"
                )
            status = httpx.get(f"{proxy}/governor/status").json()
            print(f"proxy counters: {status['counters']}")
            print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        finally:
            for process in (governor, fake):
                process.send_signal(signal.SIGTERM)
                process.wait(30)


if __name__ == "__main__":
    main()
