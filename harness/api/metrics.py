"""`/metrics`: the read models in the Prometheus text format, read afresh at every scrape.

A custom collector rather than counters kept in memory: `tickwork serve` may run apart
from `tickwork run` (or beside several replicas), and the store is the one place that
knows every tick. Each scrape reads the counters the ticks projection keeps per level
(`harness.projections.tick_counts`): a few rows per level, however many ticks ran.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from harness.api.reads import Reads
from harness.contracts import TickScheduled
from harness.projections import (
    DURATION_BUCKETS,
    Durations,
    TickInFlight,
    paused_levels,
    tick_counters,
    ticks_in_flight,
)
from harness.scheduling.status import projection_lag


def text_format(families: Iterable[Metric]) -> bytes:
    """The families in Prometheus' text format, byte for byte as `generate_latest` writes it.

    `generate_latest` validates and escapes every label name of every sample, which took
    0.6 s for the 23,000 samples of 1,000 levels; the names here are tickwork's own,
    valid by construction, so only label values are escaped (backslash, newline, quote).
    """
    out: list[str] = []
    for family in families:
        name = f"{family.name}_total" if family.type == "counter" else family.name
        help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        for sample_name, labels, value, *_ in family.samples:
            pairs = ",".join(f'{key}="{_escaped(labels[key])}"' for key in sorted(labels))
            out.append(
                f"{sample_name}{{{pairs}}} {_go_float(value)}\n"
                if pairs
                else f"{sample_name} {_go_float(value)}\n"
            )
    return "".join(out).encode()


def _escaped(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _go_float(value: float) -> str:
    """A sample's value as Go prints a float64, as Prometheus' own clients write it."""
    if type(value) is int and -(10**15) < value < 10**6:
        return f"{value}.0"  # what repr gives for these; most samples are such counts
    number = float(value)
    if number == math.inf:
        return "+Inf"
    if number == -math.inf:
        return "-Inf"
    if math.isnan(number):
        return "NaN"
    text = repr(number)
    dot = text.find(".")
    if number > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


FIRE_LAG_WINDOW = 100
"""Scheduled slots per scrape whose fire lag is reported (the latest, of all levels)."""


class StoreCollector(Collector):
    """Reads the metrics from the store at each scrape, so any replica's ticks are counted."""

    def __init__(self, reads: Reads) -> None:
        self.reads = reads

    def collect(self) -> Iterator[Metric]:
        """Bring the read models up to date, then yield every metric family."""
        reads = self.reads.fresh()
        counters = tick_counters(reads.store)
        yield from self._ticks(counters.statuses)
        yield from self._durations(counters.durations)
        yield from self._tool_caps(counters.tool_caps)
        yield self._fire_lag()
        yield from self._spend()
        yield from self._status(ticks_in_flight(reads.store))

    def _status(self, flying: list[TickInFlight]) -> Iterator[Metric]:
        """Ticks in flight, pauses and projection lag: a status snapshot's metrics.

        Not the snapshot itself: its spend and next slot of every level took 60 ms at
        1,000 levels, and no metric shows them.
        """
        reads = self.reads
        in_flight = GaugeMetricFamily(
            "tickwork_ticks_in_flight",
            "Ticks running or queued for a place now.",
            labels=["level", "state"],
        )
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for tick in flying:
            counts[(tick.level, "running" if tick.status == "running" else "queued")] += 1
        for level in reads.settings.levels:
            for state in ("running", "queued"):
                in_flight.add_metric([level, state], counts.pop((level, state), 0))
        for (level, state), count in counts.items():
            in_flight.add_metric([level, state], count)
        yield in_flight
        paused = GaugeMetricFamily(
            "tickwork_level_paused", "1 while a level is paused.", labels=["level"]
        )
        stopped = paused_levels(reads.store, reads.settings.levels)
        for level in reads.settings.levels:
            paused.add_metric([level], int(level in stopped))
        yield paused
        position, _, behind_by = projection_lag(reads.store, reads.prices)
        yield GaugeMetricFamily(
            "tickwork_store_position", "The last global position stored.", value=position
        )
        lag = GaugeMetricFamily(
            "tickwork_projection_lag_events",
            "Events stored but not yet folded into a read model.",
            labels=["projection"],
        )
        for name, behind in behind_by.items():
            lag.add_metric([name], behind)
        yield lag

    def _ticks(self, statuses: list[tuple[str, str, int]]) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "tickwork_ticks",
            "Ticks of the read model by level and status.",
            labels=["level", "status"],
        )
        for level, status, count in statuses:
            family.add_metric([level, status], count)
        yield family

    def _durations(self, levels: list[Durations]) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "tickwork_tick_duration_seconds",
            "Run time of ended ticks, from start to end (as first known; buckets only grow).",
            labels=["level"],
        )
        for level in levels:
            family.add_metric(
                [level.level],
                [
                    *((str(b), n) for b, n in zip(DURATION_BUCKETS, level.at_most, strict=True)),
                    ("+Inf", level.count),
                ],
                level.total_seconds,
            )
        yield family

    def _tool_caps(self, tool_caps: list[tuple[str, int, int]]) -> Iterator[Metric]:
        hits = CounterMetricFamily(
            "tickwork_tool_cap_hits",
            "Ticks whose tool-call cap refused at least one call.",
            labels=["level"],
        )
        refused = CounterMetricFamily(
            "tickwork_tool_calls_cancelled",
            "Tool calls refused by a tick's cap (they cost nothing).",
            labels=["level"],
        )
        for level, ticks_hit, calls in tool_caps:
            hits.add_metric([level], ticks_hit)
            refused.add_metric([level], calls)
        yield hits
        yield refused

    def _fire_lag(self) -> Metric:
        """How late the scheduler claimed slots: TickScheduled's recorded_at minus its slot.

        A jittered slot is late from its fire time (`fire_at`, the slot plus the level's
        jitter), not from the slot. Only first attempts of scheduled slots count (a manual
        tick has no slot, a retry is late on purpose). The latest and the largest lag of
        the recent window per level.
        """
        family = GaugeMetricFamily(
            "tickwork_scheduler_fire_lag_seconds",
            f"Seconds between a slot and its claim, over the last {FIRE_LAG_WINDOW} slots.",
            labels=["level", "stat"],
        )
        lags: dict[str, list[float]] = defaultdict(list)
        for event in self.reads.store.read_last(FIRE_LAG_WINDOW, types=[TickScheduled.type]):
            data = event.data
            if not data.get("slot") or data.get("attempt", 1) != 1:
                continue
            fired = datetime.fromisoformat(data.get("fire_at") or data["slot"])
            lags[data["level"]].append((event.recorded_at - fired).total_seconds())
        for level, values in lags.items():
            family.add_metric([level, "last"], values[0])
            family.add_metric([level, "max"], max(values))
        return family

    def _spend(self) -> Iterator[Metric]:
        """Today's spend (UTC): counters that restart at midnight, as `increase()` reads them.

        Not the spend of every day: pricing a row per level, model and day grew with the
        days kept (311 ms CPU a scrape at 1,000 levels after 30 days, 81 ms after one).
        """
        tokens = CounterMetricFamily(
            "tickwork_tokens",
            "Tokens spent today (UTC), by level, model and kind; restarts at 00:00 UTC.",
            labels=["level", "model", "kind"],
        )
        calls = CounterMetricFamily(
            "tickwork_model_calls",
            "Model calls today (UTC) that reported (or estimated) usage; restarts at 00:00 UTC.",
            labels=["level", "model"],
        )
        cost = CounterMetricFamily(
            "tickwork_cost_usd",
            "USD spent today (UTC), priced now; models without a price are left out; "
            "restarts at 00:00 UTC.",
            labels=["level", "model"],
        )
        for row in self.reads.spend(by=("level", "model"), since=datetime.now(UTC).date()):
            labels = [row.group["level"], row.group["model"]]
            tokens.add_metric([*labels, "prompt"], row.prompt_tokens)
            tokens.add_metric([*labels, "completion"], row.completion_tokens)
            calls.add_metric(labels, row.model_calls)
            if row.cost_usd is not None:
                cost.add_metric(labels, row.cost_usd)
        yield tokens
        yield calls
        yield cost
