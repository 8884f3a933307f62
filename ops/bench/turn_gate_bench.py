"""Turn gate benchmark: the CPU a tick's governor spends holding tool calls to the turn's end.

Streams one long Anthropic answer from the fake upstream (`--chars` of text in 16-char
deltas, then one tool call) and feeds its bytes to a `TurnGate` in the upstream's chunk
sizes, `--rounds` times, beside the usage scanner every governed answer already goes
through; prints the CPU microseconds per answer and per KB of each. Then the same answer
in each protocol a Strands tick reads its usage parts from (`workers.wire.WireWatch`):
the watch with its usage scanner beside the watch for the end of turn alone.

    .venv/bin/python ops/bench/turn_gate_bench.py [--chars 20000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import httpx

from harness.contracts import TICK_HEADER, Api
from harness.devtools.fake_llm import Step, ToolCallSpec, fake_upstream
from harness.governor.proxy.dialects import ANTHROPIC_MESSAGES
from harness.governor.proxy.turns import TurnGate
from workers.wire import SCANNERS, WireWatch

CHUNK_BYTES = 1024
"""About what aiohttp's `iter_any` hands the relay of a streamed answer at a time."""


def main() -> None:
    """Print the gate's and the scanner's CPU per answer."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    call = ToolCallSpec(name="Bash", arguments={"command": "ls"})
    answers: dict[Api, bytes] = {}
    with fake_upstream() as fake:
        for api, path in PATHS.items():
            fake.script("bench", [Step(text="x" * args.chars, tool_calls=[call])])
            body = {"model": "m", "stream": True, "max_tokens": 100, "messages": [], "input": []}
            body["stream_options"] = {"include_usage": True}
            answers[api] = httpx.post(
                fake.origin + path, json=body, headers={TICK_HEADER: "bench"}
            ).content
    stream = answers["anthropic"]
    chunks = in_chunks(stream)

    def gate() -> None:
        turn = TurnGate(ANTHROPIC_MESSAGES)
        for chunk in chunks:
            turn.feed(chunk)
        turn.finish()

    def scanner() -> None:
        scan = ANTHROPIC_MESSAGES.scanner(True)
        for chunk in chunks:
            scan.feed(chunk)
        scan.finish()

    print(f"answer: {len(stream):,} bytes in {len(chunks)} chunks")
    for name, run in (("turn gate", gate), ("usage scanner", scanner)):
        measure(name, run, len(stream), args.rounds)
    for api, answer in answers.items():
        for scanned in (False, True):
            reads = "usage parts read" if scanned else "end of turn only"
            name = f"Strands tick's wire watch, {api}, {reads}"
            measure(
                name,
                lambda a=api, b=answer, s=scanned: watch(a, in_chunks(b), s),
                len(answer),
                args.rounds,
            )


PATHS: dict[Api, str] = {
    "anthropic": "/v1/messages",
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
}


def in_chunks(answer: bytes) -> list[bytes]:
    """The answer in the pieces a client reads it in."""
    return [answer[at : at + CHUNK_BYTES] for at in range(0, len(answer), CHUNK_BYTES)]


def watch(api: Api, chunks: list[bytes], scanned: bool) -> None:
    """What `WireWatch` does with an answer's chunks, its usage scanner on or off."""
    wire = WireWatch(api)
    wire.scanner = SCANNERS[api](True, usage_only=True) if scanned else None
    carried = b""
    for chunk in chunks:
        wire.saw(carried + chunk, chunk)
        carried = chunk[-64:]
    wire.usage()


def measure(name: str, run: Callable[[], None], size: int, rounds: int) -> None:
    """Print `run`'s CPU per answer and per KB of the answer."""
    started = time.process_time()
    for _ in range(rounds):
        run()
    per_answer = (time.process_time() - started) / rounds * 1e6
    print(
        f"{name}: {per_answer:,.0f} µs CPU per answer, {per_answer / (size / 1024):,.1f} µs per KB"
    )


if __name__ == "__main__":
    main()
