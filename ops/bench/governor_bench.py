"""tickwork's governor proxy side by side with the predecessor's, against one upstream.

The predecessor's governor is run from its own file in /work/shared/predecessors (never
copied into the tree) in its own process; `tickwork governor` in another; both forward to
one canned OpenAI-compatible upstream (this script with `--upstream`, an asyncio server
that answers every chat completion at once, so the proxies and not the upstream are
measured). Figures, each with the same request (the last turn of a tool-dense session,
~19k characters, every request measured and under the threshold):

- requests/s with `--clients` concurrent keep-alive clients for `--seconds`, not
  streaming and streaming (`include_usage`), directly and through each proxy;
- added p50/p99 latency: sequential requests, direct and through each proxy in turn.

    .venv/bin/python ops/bench/governor_bench.py [--seconds 8] [--clients 50] [--requests 300]
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

import aiohttp
import httptools
import orjson
import psutil
from governor import free_port, percentile
from machine import describe

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.corpus import session

TICKWORK = str(Path(sys.executable).with_name("tickwork"))
PREDECESSOR = Path("/work/shared/predecessors/000_f1e1a0888c028997.txt")
THRESHOLD = 1_000_000
"""Far above the request, so both proxies measure, pass and count every request."""

COMPLETION = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Done."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5000, "completion_tokens": 2, "total_tokens": 5002},
    }
)


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


STREAM = (
    _chunk({"role": "assistant", "content": ""})
    + _chunk({"content": "Done."})
    + _chunk({}, "stop")
    + b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,'
    + b'"model":"bench","choices":[],"usage":{"prompt_tokens":5000,"completion_tokens":2,'
    + b'"total_tokens":5002}}\n\n'
    + b"data: [DONE]\n\n"
)


class Upstream(asyncio.Protocol):
    """HTTP/1.1 with keep-alive; a chat completion is answered at once, streamed or not."""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_message_begin(self) -> None:
        self.body = []

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        streamed = b'"stream":true' in body or b'"stream": true' in body
        content, kind = (STREAM, b"text/event-stream") if streamed else (COMPLETION, None)
        kind = kind or b"application/json"
        keep = self.parser.should_keep_alive()
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: " + kind + b"\r\ncontent-length: "
            b"%d\r\nconnection: %s\r\n\r\n" % (len(content), b"keep-alive" if keep else b"close")
        )
        self.transport.write(head + content)
        if not keep:
            self.transport.close()


def serve_upstream(port: int) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Upstream, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def start(command: list[str], cwd: Path, env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{command} did not start")


async def rate(origin: str, body: bytes, clients: int, seconds: float) -> tuple[float, int]:
    """Completed requests per second with `clients` keep-alive clients, and how many failed."""
    done = failed = 0
    connector = aiohttp.TCPConnector(limit=clients, force_close=False)
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as http:
        stop_at = time.monotonic() + seconds

        async def client() -> None:
            nonlocal done, failed
            while time.monotonic() < stop_at:
                try:
                    async with http.post(
                        f"{origin}/v1/chat/completions", data=body, headers=headers
                    ) as answer:
                        await answer.read()
                        if answer.status == 200:
                            done += 1
                        else:
                            failed += 1
                except (aiohttp.ClientError, OSError):
                    failed += 1

        await asyncio.gather(*(client() for _ in range(clients)))
    return done / seconds, failed


async def latencies(origins: dict[str, str], body: bytes, count: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {name: [] for name in origins}
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession() as http:
        for index in range(count + 20):
            for name, origin in origins.items():
                began = time.perf_counter()
                async with http.post(
                    f"{origin}/v1/chat/completions", data=body, headers=headers
                ) as answer:
                    await answer.read()
                if index >= 20:  # warm-up
                    timings[name].append((time.perf_counter() - began) * 1000)
    return timings


def _cpu_seconds(process: psutil.Process | None) -> float:
    """User and system CPU of a proxy's process, all its threads."""
    if process is None:
        return 0.0
    times = process.cpu_times()
    return times.user + times.system


def predecessor_source(folder: Path) -> Path:
    """The predecessor's governor as a runnable file in a temporary folder (not the tree)."""
    lines = PREDECESSOR.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#!"))
    script = folder / "predecessor_governor.py"
    script.write_text("\n".join(lines[start:]) + "\n", encoding="utf-8")
    return script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        serve_upstream(args.upstream)
        return
    print(describe())
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    request = session(7, 6)[-1]
    plain = orjson.dumps(request)
    streamed = orjson.dumps({**request, "stream": True, "stream_options": {"include_usage": True}})
    print(f"request: {len(plain):,} bytes, {len(request['messages'])} messages, tools")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TICKWORK_", "GOV_"))}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        ports = {"upstream": free_port(), "tickwork": free_port(), "predecessor": free_port()}
        direct = f"http://127.0.0.1:{ports['upstream']}"
        common = {**env, "GOV_UPSTREAM": direct, "GOV_THRESHOLD": str(THRESHOLD)}
        processes = [
            start(
                [sys.executable, __file__, "--upstream", str(ports["upstream"])],
                folder,
                env,
                ports["upstream"],
            ),
            start(
                [TICKWORK, "governor"],
                folder,
                {**common, "GOV_PORT": str(ports["tickwork"])},
                ports["tickwork"],
            ),
            start(
                [sys.executable, str(predecessor_source(folder))],
                folder,
                {
                    **common,
                    "GOV_PORT": str(ports["predecessor"]),
                    "GOV_HOST": "127.0.0.1",
                    "GOV_LOG": str(folder / "predecessor.log"),
                    "GOV_ANNOUNCE_URL": "",
                },
                ports["predecessor"],
            ),
        ]
        origins = {
            "direct": direct,
            "tickwork": f"http://127.0.0.1:{ports['tickwork']}",
            "predecessor": f"http://127.0.0.1:{ports['predecessor']}",
        }
        try:
            timings = asyncio.run(latencies(origins, plain, args.requests))
            base = statistics.median(timings["direct"])
            base99 = percentile(timings["direct"], 0.99)
            for name, values in timings.items():
                p50, p99 = statistics.median(values), percentile(values, 0.99)
                print(
                    f"latency {name:11} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  "
                    f"added p50 {p50 - base:5.2f} ms  p99 {p99 - base99:5.2f} ms"
                )
            served = {"tickwork": processes[1].pid, "predecessor": processes[2].pid}
            for label, body in (("plain", plain), ("streaming", streamed)):
                rates = {}
                for name, origin in origins.items():
                    proxy = psutil.Process(served[name]) if name in served else None
                    cpu_before = _cpu_seconds(proxy)
                    per_second, failed = asyncio.run(rate(origin, body, args.clients, args.seconds))
                    rates[name] = per_second
                    # CPU per request holds still when the machine is loaded; the rate does not.
                    served_count = max(per_second * args.seconds, 1)
                    cpu_ms = (_cpu_seconds(proxy) - cpu_before) * 1000 / served_count
                    cpu = f", {cpu_ms:.2f} ms CPU a request" if proxy else ""
                    print(
                        f"{label:9} {name:11} {per_second:7,.0f} requests/s "
                        f"({args.clients} clients, {failed} failed{cpu})"
                    )
                ratio = rates["tickwork"] / max(rates["predecessor"], 1e-9)
                print(f"{label:9} tickwork / predecessor: {ratio:.2f}x (goal >= 2x)")
            print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        finally:
            for process in reversed(processes):
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()


if __name__ == "__main__":
    main()
