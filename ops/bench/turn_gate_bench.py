"""Turn gate benchmark: the CPU a tick's governor spends holding tool calls to the turn's end.

Streams one long Anthropic answer from the fake upstream (`--chars` of text in 16-char
deltas, then one tool call) and feeds its bytes to a `TurnGate` in the upstream's chunk
sizes, `--rounds` times, beside the usage scanner every governed answer already goes
through; prints the CPU microseconds per answer and per KB of each.

    .venv/bin/python ops/bench/turn_gate_bench.py [--chars 20000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import time

import httpx

from harness.contracts import TICK_HEADER
from harness.devtools.fake_llm import Step, ToolCallSpec, fake_upstream
from harness.governor.proxy.dialects import ANTHROPIC_MESSAGES
from harness.governor.proxy.turns import TurnGate

CHUNK_BYTES = 1024
"""About what aiohttp's `iter_any` hands the relay of a streamed answer at a time."""


def main() -> None:
    """Print the gate's and the scanner's CPU per answer."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    call = ToolCallSpec(name="Bash", arguments={"command": "ls"})
    with fake_upstream() as fake:
        fake.script("bench", [Step(text="x" * args.chars, tool_calls=[call])])
        body = {"model": "m", "stream": True, "max_tokens": 100, "messages": []}
        stream = httpx.post(
            fake.origin + "/v1/messages", json=body, headers={TICK_HEADER: "bench"}
        ).content
    chunks = [stream[at : at + CHUNK_BYTES] for at in range(0, len(stream), CHUNK_BYTES)]

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

    kb = len(stream) / 1024
    print(f"answer: {len(stream):,} bytes in {len(chunks)} chunks")
    for name, run in (("turn gate", gate), ("usage scanner", scanner)):
        started = time.process_time()
        for _ in range(args.rounds):
            run()
        per_answer = (time.process_time() - started) / args.rounds * 1e6
        print(f"{name}: {per_answer:,.0f} µs CPU per answer, {per_answer / kb:,.1f} µs per KB")


if __name__ == "__main__":
    main()
