"""Booking cost per model call in the worker: priced with provenance, beside unpriced.

Every call a tick makes is booked in its worker (`workers.call_booking`): a
`BudgetSpent` and a `ModelCalled`, serialized for the store, before the next call may
start. Pricing at booking adds a dictionary lookup of the tick's price (looked up once
when the tick was prepared, carried in its payload) and the arithmetic of the call's
USD. Printed: the p50 and p90 of one call's booking (`CallBooking.ended` and
`to_record` of each event), in a fresh interpreter per run, `--runs` times interleaved:

- `unpriced`: a tick whose payload carries no price (what every call cost before);
- `priced`: the call's model and target priced, with a tier above 200k input tokens;
- `--against OLD_CHECKOUT`: the same call booked by an older checkout, as the anchor;

and what the preparer pays once per tick and target (`PriceBook.call_price` on a book
not yet asked, genai-prices loaded): the lookup the worker no longer does.

    .venv/bin/python ops/bench/booking_bench.py [--runs 5] [--calls 20000] [--against DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from machine import describe

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, statistics, sys, time
from workers import CallBooking, CallFacts
kind, calls = sys.argv[1], int(sys.argv[2])
prices = {}
if kind == "priced":
    from harness.contracts import CallPrice, Rates
    ladder = (Rates(-1, 0.15, 0.6, 0.075, None), Rates(200_000, 0.3, 1.2, 0.15, None))
    prices = {("gpt-4o-mini", "cloud"): CallPrice(
        model="gpt-4o-mini", target="cloud", source="genai-prices@0.2.5", ladder=ladder
    )}
booking = CallBooking("tick-bench", "min", "0" * 64, *([prices] if prices else []))
facts = CallFacts(
    model="gpt-4o-mini", call=1, prompt_tokens=1_234, completion_tokens=56,
    cache_read_tokens=1_000, target="cloud", duration_ms=12.5, stop_reason="end_turn",
)
for _ in range(2_000):
    [event.to_record() for event in booking.ended(facts)]
times = []
for _ in range(calls):
    start = time.perf_counter_ns()
    [event.to_record() for event in booking.ended(facts)]
    times.append(time.perf_counter_ns() - start)
times.sort()
out = {"p50": times[len(times) // 2] / 1000, "p90": times[len(times) * 9 // 10] / 1000}
if kind == "priced":
    from harness.prices import PriceBook
    PriceBook().call_price("gpt-4o-mini", "2026-12-01")  # genai-prices loaded
    lookups = []
    for _ in range(50):
        start = time.perf_counter_ns()
        PriceBook().call_price("gpt-4o-mini", "2026-12-01", "cloud")
        lookups.append(time.perf_counter_ns() - start)
    out["lookup"] = statistics.median(lookups) / 1000
print(json.dumps(out))
"""


def probe(checkout: Path, kind: str, calls: int) -> dict[str, float]:
    """One fresh interpreter's figures for `kind`, booked by `checkout`'s code."""
    python = checkout / ".venv" / "bin" / "python"
    found = subprocess.run(
        [str(python if python.exists() else sys.executable), "-c", PROBE, kind, str(calls)],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(found.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--against", type=Path, help="an older checkout, booked as the anchor")
    args = parser.parse_args()
    print(describe())
    cases = {"unpriced": (ROOT, "unpriced"), "priced": (ROOT, "priced")}
    if args.against is not None:
        cases = {"before (--against)": (args.against.resolve(), "unpriced"), **cases}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (checkout, kind) in cases.items():
            runs[name].append(probe(checkout, kind, args.calls))
    base = statistics.median(run["p50"] for run in runs[next(iter(cases))])
    print(f"one call booked ({args.calls:,} calls a run, median of {args.runs} runs):")
    for name, figures in runs.items():
        p50 = statistics.median(run["p50"] for run in figures)
        p90 = statistics.median(run["p90"] for run in figures)
        print(f"  {name:<20} p50 {p50:6.1f} us  p90 {p90:6.1f} us  ({p50 - base:+.1f} us)")
    lookups = [run["lookup"] for run in runs["priced"]]
    print(
        f"once per tick and target, in the preparer: a price looked up "
        f"{statistics.median(lookups):.0f} us"
    )


if __name__ == "__main__":
    main()
