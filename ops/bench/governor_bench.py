"""tickwork's governor proxy side by side with the predecessor's, against one upstream.

The predecessor's governor is run from its own file in /work/shared/predecessors (never
copied into the tree) in its own process; `tickwork governor` in another; both forward to
one canned upstream (this script with `--upstream`, an asyncio server that answers every
chat completion and every Anthropic message at once, so the proxies and not the upstream
are measured). Figures, each with the same request (the last turn of a tool-dense session,
~19k characters, every request measured and under the threshold), OpenAI chat completions
through both proxies and the same conversation as an Anthropic Messages request through
tickwork's (the predecessor speaks only OpenAI):

- requests/s with `--clients` concurrent keep-alive clients for `--seconds`, not
  streaming and streaming (`include_usage`), directly and through each proxy, with the
  proxy's CPU per request;
- added p50/p99 latency: sequential requests, direct and through each proxy in turn;
- the Anthropic path's cost per request (CPU, added p50) over the OpenAI path's (goal:
  at most 1.2x), and in this process the governor's own steps for each API (parse and
  check, measure, read the usage of the whole answer), the best of 30 interleaved rounds:
  a figure the machine's load disturbs far less than the ones over sockets.

    .venv/bin/python ops/bench/governor_bench.py [--seconds 8] [--clients 50] [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import httptools
import orjson
import psutil
from governor import free_port, percentile
from machine import describe

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness.governor.proxy.dialects import ANTHROPIC_MESSAGES, OPENAI_CHAT, Dialect
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
ANTHROPIC_USAGE = {
    "input_tokens": 4000,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 1000,
    "output_tokens": 2,
}
MESSAGE = {
    "id": "msg_bench",
    "type": "message",
    "role": "assistant",
    "model": "bench",
    "content": [{"type": "text", "text": "Done."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": ANTHROPIC_USAGE,
}


def _event(data: dict[str, Any]) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


MESSAGE_EVENTS = b"".join(
    _event(data)
    for data in (
        {
            "type": "message_start",
            "message": {
                **MESSAGE,
                "content": [],
                "stop_reason": None,
                "usage": {**ANTHROPIC_USAGE, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Done."},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 2},
        },
        {"type": "message_stop"},
    )
)
ANSWERS = {
    "openai": (COMPLETION, STREAM),
    "anthropic": (orjson.dumps(MESSAGE), MESSAGE_EVENTS),
}
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


def anthropic_request(chat: dict[str, Any]) -> dict[str, Any]:
    """The same conversation as an Anthropic Messages request (system, tool_use, tool_result)."""
    system = [m["content"] for m in chat["messages"] if m["role"] == "system"]
    turns: list[dict[str, Any]] = []
    for message in chat["messages"]:
        if message["role"] == "user":
            turns.append({"role": "user", "content": message["content"]})
        elif message["role"] == "assistant":
            blocks = [
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "input": orjson.loads(call["function"]["arguments"]),
                }
                for call in message["tool_calls"]
            ]
            turns.append({"role": "assistant", "content": blocks})
        elif message["role"] == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": message["content"],
            }
            if turns[-1]["role"] == "user" and isinstance(turns[-1]["content"], list):
                turns[-1]["content"].append(result)
            else:
                turns.append({"role": "user", "content": [result]})
    tools = [
        {
            "name": tool["function"]["name"],
            "description": tool["function"].get("description", ""),
            "input_schema": tool["function"]["parameters"],
        }
        for tool in chat["tools"]
    ]
    return {
        "model": "bench-claude",
        "max_tokens": 1024,
        "system": "\n".join(system),
        "messages": turns,
        "tools": tools,
    }


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
        self.url = b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        streamed = b'"stream":true' in body or b'"stream": true' in body
        whole, events = ANSWERS["anthropic" if b"/messages" in self.url else "openai"]
        content = events if streamed else whole
        kind = b"text/event-stream" if streamed else b"application/json"
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


async def rate(
    origin: str, path: str, body: bytes, clients: int, seconds: float
) -> tuple[float, int]:
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
                    async with http.post(f"{origin}{path}", data=body, headers=headers) as answer:
                        await answer.read()
                        if answer.status == 200:
                            done += 1
                        else:
                            failed += 1
                except (aiohttp.ClientError, OSError):
                    failed += 1

        await asyncio.gather(*(client() for _ in range(clients)))
    return done / seconds, failed


async def latencies(routes: dict[str, tuple[str, bytes]], count: int) -> dict[str, list[float]]:
    """Sequential requests to each route in turn: name -> (URL, body), milliseconds each."""
    timings: dict[str, list[float]] = {name: [] for name in routes}
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession() as http:
        for index in range(count + 20):
            for name, (url, body) in routes.items():
                began = time.perf_counter()
                async with http.post(url, data=body, headers=headers) as answer:
                    await answer.read()
                if index >= 20:  # warm-up
                    timings[name].append((time.perf_counter() - began) * 1000)
    return timings


def measure_latency(
    origins: dict[str, str],
    routes: list[tuple[str, str]],
    bodies: dict[str, tuple[bytes, bytes]],
    count: int,
) -> dict[str, float]:
    """Print each route's p50/p99 and what the proxy adds; tickwork's added p50 per API."""
    timings = asyncio.run(
        latencies(
            {f"{api} {name}": (origins[name] + PATHS[api], bodies[api][0]) for api, name in routes},
            count,
        )
    )
    added: dict[str, float] = {}
    for api, name in routes:
        values, direct = timings[f"{api} {name}"], timings[f"{api} direct"]
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        base, base99 = statistics.median(direct), percentile(direct, 0.99)
        if name == "tickwork":
            added[api] = p50 - base
        print(
            f"latency {api:9} {name:11} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  "
            f"added p50 {p50 - base:5.2f} ms  p99 {p99 - base99:5.2f} ms"
        )
    return added


def governed_steps(bodies: dict[str, tuple[bytes, bytes]]) -> dict[str, float]:
    """Microseconds of the governor's own work on one request of each API, in-process."""

    def steps(dialect: Dialect, body: bytes, answer: bytes) -> None:
        chat = dialect.parse(body)
        assert chat is not None, "the bench's request is a model call"
        dialect.chars(chat)
        dialect.tail(chat)
        scanner = dialect.scanner(False)
        scanner.feed(answer)
        scanner.finish()

    cases = {
        api: functools.partial(steps, dialect, bodies[api][0], ANSWERS[api][0])
        for api, dialect in (("openai", OPENAI_CHAT), ("anthropic", ANTHROPIC_MESSAGES))
    }
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(30):
        for api, case in cases.items():
            best[api] = min(best[api], timeit.timeit(case, number=200) / 200 * 1e6)
    return best


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
    claude = anthropic_request(request)
    bodies = {
        "openai": (
            orjson.dumps(request),
            orjson.dumps({**request, "stream": True, "stream_options": {"include_usage": True}}),
        ),
        "anthropic": (orjson.dumps(claude), orjson.dumps({**claude, "stream": True})),
    }
    for api, (plain, _) in bodies.items():
        print(f"{api} request: {len(plain):,} bytes, {len(request['messages'])} messages, tools")
    own = governed_steps(bodies)
    print(
        "governor's own steps in-process: openai {openai:.1f} us, anthropic {anthropic:.1f} us, "
        "{ratio:.2f}x".format(**own, ratio=own["anthropic"] / own["openai"])
    )
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
        served = {"tickwork": processes[1].pid, "predecessor": processes[2].pid}
        # The predecessor (OpenAI only) goes last in each round: what its process still
        # does after answering then falls on the next round's first request, not always
        # on the same API's.
        routes = [(api, name) for api in bodies for name in ("direct", "tickwork")]
        routes.append(("openai", "predecessor"))
        try:
            added = measure_latency(origins, routes, bodies, args.requests)
            cpu: dict[tuple[str, str], float] = {}
            for kind, label in enumerate(("plain", "streaming")):
                rates: dict[tuple[str, str], float] = {}
                for api, name in routes:
                    proxy = psutil.Process(served[name]) if name in served else None
                    cpu_before = _cpu_seconds(proxy)
                    body = bodies[api][kind]
                    per_second, failed = asyncio.run(
                        rate(origins[name], PATHS[api], body, args.clients, args.seconds)
                    )
                    rates[api, name] = per_second
                    # CPU per request holds still when the machine is loaded; the rate does not.
                    served_count = max(per_second * args.seconds, 1)
                    cpu_ms = (_cpu_seconds(proxy) - cpu_before) * 1000 / served_count
                    if name == "tickwork":
                        cpu[api, label] = cpu_ms
                    shown = f", {cpu_ms:.2f} ms CPU a request" if proxy else ""
                    print(
                        f"{label:9} {api:9} {name:11} {per_second:7,.0f} requests/s "
                        f"({args.clients} clients, {failed} failed{shown})"
                    )
                ratio = rates["openai", "tickwork"] / max(rates["openai", "predecessor"], 1e-9)
                print(f"{label:9} tickwork / predecessor: {ratio:.2f}x (goal >= 2x)")
            for label in ("plain", "streaming"):
                share = cpu["anthropic", label] / max(cpu["openai", label], 1e-9)
                print(f"{label:9} anthropic / openai CPU a request: {share:.2f}x (goal <= 1.2x)")
            share = added["anthropic"] / max(added["openai"], 1e-9)
            print(f"latency   anthropic / openai added p50: {share:.2f}x (goal <= 1.2x)")
            with urllib.request.urlopen(f"{origins['tickwork']}/governor/status") as answer:
                counters = orjson.loads(answer.read())["counters"]
            print(
                "tickwork governed {openai:,} openai and {anthropic:,} anthropic requests, "
                "refused {refused:,}; usage read from {read:,}, missing from {missing:,}".format(
                    openai=counters.get("openai", 0),
                    anthropic=counters.get("anthropic", 0),
                    refused=counters.get("invalid", 0),
                    read=sum(n for k, n in counters.items() if k.startswith("calibration_")),
                    missing=counters.get("no_usage", 0),
                )
            )
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
