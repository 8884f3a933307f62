"""A tool-dense corpus of OpenAI chat requests: agent sessions that grow turn by turn.

Each session has a system prompt, a dozen tool schemas and rounds of assistant tool calls
with JSON arguments and tool results (file contents, JSON records, logs), the kind of
request where counting message text alone misjudges the size. Deterministic per seed.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

WORDS = [
    "deploy",
    "service",
    "queue",
    "latency",
    "error",
    "budget",
    "index",
    "shard",
    "replica",
    "migrate",
    "rollback",
    "config",
    "timeout",
    "worker",
    "schedule",
    "retry",
    "backoff",
    "metric",
    "alert",
    "ticket",
    "owner",
    "review",
    "branch",
    "commit",
    "release",
    "cache",
    "eviction",
    "throughput",
    "ledger",
    "invoice",
    "customer",
    "region",
]


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def _tool(rng: random.Random, index: int) -> dict[str, Any]:
    properties = {
        f"{rng.choice(WORDS)}_{i}": {
            "type": rng.choice(["string", "integer"]),
            "description": _sentence(rng, 6),
        }
        for i in range(rng.randint(2, 5))
    }
    return {
        "type": "function",
        "function": {
            "name": f"{rng.choice(WORDS)}_{index}",
            "description": _sentence(rng, 14),
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties)[:1],
            },
        },
    }


def _result(rng: random.Random) -> str:
    kind = rng.randrange(3)
    if kind == 0:
        rows = [
            {"id": rng.randrange(10**6), "name": rng.choice(WORDS), "value": rng.random()}
            for _ in range(rng.randint(5, 30))
        ]
        return orjson.dumps(rows).decode()
    if kind == 1:
        return "\n".join(
            f"2026-11-30T0{rng.randrange(10)}:{rng.randrange(60):02d}:00 ERROR {_sentence(rng, 8)}"
            for _ in range(rng.randint(5, 25))
        )
    return "\n".join(
        f"def {rng.choice(WORDS)}_{i}(x):\n    return x * {rng.randrange(100)}"
        for i in range(rng.randint(5, 20))
    )


def session(seed: int, turns: int) -> list[dict[str, Any]]:
    """The requests of one session: each one resends the whole history so far."""
    rng = random.Random(seed)
    tools = [_tool(rng, i) for i in range(12)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": " ".join(_sentence(rng, 12) for _ in range(6))},
        {"role": "user", "content": _sentence(rng, 30)},
    ]
    requests = []
    for turn in range(turns):
        requests.append({"model": "corpus-model", "messages": list(messages), "tools": tools})
        calls = [
            {
                "id": f"call_{seed}_{turn}_{i}",
                "type": "function",
                "function": {
                    "name": rng.choice(tools)["function"]["name"],
                    "arguments": orjson.dumps(
                        {rng.choice(WORDS): _sentence(rng, 5), "limit": rng.randrange(100)}
                    ).decode(),
                },
            }
            for i in range(rng.randint(1, 3))
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [
            {"role": "tool", "tool_call_id": call["id"], "content": _result(rng)} for call in calls
        ]
    return requests


def text_only_chars(request: dict[str, Any]) -> int:
    """What a naive estimator counts: message text, without tool calls or tool schemas."""
    return sum(len(m.get("content") or "") for m in request["messages"])
