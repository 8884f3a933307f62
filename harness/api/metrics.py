"""`/metrics`: the read models in the Prometheus text format, kept rendered between scrapes.

Read from the store rather than counters kept in memory: `tickwork serve` may run apart
from `tickwork run` (or beside several replicas), and the store is the one place that
knows every tick. Each scrape reads the counters the ticks projection keeps per level
(`harness.projections.tick_counts`): a few rows per level, however many ticks ran.

At 1,000 levels a scrape is 23,000 samples (1.5 MB), and writing them took most of its
time (150-186 ms CPU), so the text is kept between scrapes at two grains. A read model's
families are read again only when its checkpoint has moved since the last scrape (a
scrape of an idle store reads checkpoints and pauses); and each family's lines for one
row (a level's histogram, a level and model's spend) are rendered again only when that
row's values changed, so a scrape a minute later, with every level ticked, renders only
the rows that moved. The text is what a fresh render writes, byte for byte: the cache is
keyed on everything the lines are made of.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import get_args

from harness.api.reads import Reads
from harness.contracts import Provider
from harness.projections import (
    DURATION_BUCKETS,
    fire_lags,
    last_reconciliations,
    paused_levels,
    tick_counters,
    ticks_in_flight,
)
from harness.scheduling import projection_lag

FIRE_LAG_WINDOW = 100
"""Newest ticks per scrape whose fire lags are reported (of all levels; manual ones have none)."""


def header(name: str, kind: str, documentation: str) -> str:
    """A family's HELP and TYPE lines, as `generate_latest` writes them."""
    help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"


def head(name: str, labels: Mapping[str, str]) -> str:
    """A sample line up to its value: name and labels in name order, as `generate_latest`.

    `generate_latest` validates and escapes every label name of every sample, which took
    0.6 s for the 23,000 samples of 1,000 levels; the names here are tickwork's own,
    valid by construction, so only label values are escaped (backslash, newline, quote).
    """
    pairs = ",".join(f'{key}="{_escaped(labels[key])}"' for key in sorted(labels))
    return f"{name}{{{pairs}}} " if pairs else f"{name} "


def sample(name: str, labels: Mapping[str, str], value: float) -> str:
    """One sample line, as `generate_latest` writes it."""
    return f"{head(name, labels)}{_go_float(value)}\n"


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


Labels = tuple[str, ...]
Values = tuple[float, ...]


class Lines:
    """A family's text: its header, then each row's samples, kept from the last scrape.

    A row is its label values and its samples' values. Its heads (the lines up to the
    values: name and escaped labels) are made once while the row is seen at every
    scrape, and its lines are written again only when its values changed. Only the last
    scrape's rows are kept, so memory stays one entry per row.
    """

    def __init__(
        self, name: str, kind: str, documentation: str, heads: Callable[[Labels], list[str]]
    ) -> None:
        self.header = header(name, kind, documentation)
        self.heads = heads
        self._kept: dict[Labels, tuple[list[str], Values, str]] = {}

    def __call__(self, rows: Iterable[tuple[Labels, Values]]) -> str:
        """The family's text for `rows`, in their order (label values unique)."""
        kept, now = self._kept, {}
        for labels, values in rows:
            was = kept.get(labels)
            if was is not None and was[1] == values:
                now[labels] = was
                continue
            heads = self.heads(labels) if was is None else was[0]
            text = "".join(
                [f"{line}{_go_float(v)}\n" for line, v in zip(heads, values, strict=True)]
            )
            now[labels] = (heads, values, text)
        # Swapped whole: two scrapes at once each build their own text from either dict.
        self._kept = now
        return self.header + "".join([text for _, _, text in now.values()])


@dataclass(frozen=True)
class _Kept:
    """Text of a read model's families, and what it was read at."""

    key: Hashable
    text: str


_DURATION = "tickwork_tick_duration_seconds"
_BOUNDS = [*(str(bound) for bound in DURATION_BUCKETS), "+Inf"]


def _duration_heads(labels: Labels) -> list[str]:
    """A level's buckets, count and sum (as `HistogramMetricFamily` orders them)."""
    (level,) = labels
    return [
        *(head(f"{_DURATION}_bucket", {"le": le, "level": level}) for le in _BOUNDS),
        head(f"{_DURATION}_count", {"level": level}),
        head(f"{_DURATION}_sum", {"level": level}),
    ]


def _one(name: str, *names: str) -> Callable[[Labels], list[str]]:
    """A row of one sample of `name`, labelled with `names`."""

    def heads(labels: Labels) -> list[str]:
        return [head(name, dict(zip(names, labels, strict=True)))]

    return heads


def _family(name: str, kind: str, documentation: str, *names: str) -> Lines:
    """A family whose rows are one sample each (the counter's `_total` in `name`)."""
    return Lines(name, kind, documentation, _one(name, *names))


class Exposition:
    """The `/metrics` text of one server, read from the store at every scrape.

    One per server, kept between scrapes (see the module's docstring).
    """

    def __init__(self, reads: Reads) -> None:
        self.reads = reads
        self._ticks: _Kept | None = None
        self._spend: _Kept | None = None
        self.status = _family(
            "tickwork_ticks",
            "gauge",
            "Ticks of the read model by level and status.",
            "level",
            "status",
        )
        self.durations = Lines(
            _DURATION,
            "histogram",
            "Run time of ended ticks, from start to end (as first known; buckets only grow).",
            _duration_heads,
        )
        self.cap_hits = _family(
            "tickwork_tool_cap_hits_total",
            "counter",
            "Ticks whose tool-call cap refused at least one call.",
            "level",
        )
        self.calls_refused = _family(
            "tickwork_tool_calls_cancelled_total",
            "counter",
            "Tool calls refused by a tick's cap (they cost nothing).",
            "level",
        )
        self.in_flight = _family(
            "tickwork_ticks_in_flight",
            "gauge",
            "Ticks running or queued for a place now.",
            "level",
            "state",
        )
        self.fire_lag = _family(
            "tickwork_scheduler_fire_lag_seconds",
            "gauge",
            f"Seconds between a slot and its claim, over the last {FIRE_LAG_WINDOW} slots.",
            "level",
            "stat",
        )
        self.tokens = _family(
            "tickwork_tokens_total",
            "counter",
            "Tokens spent today (UTC), by level, model and kind; restarts at 00:00 UTC.",
            "level",
            "model",
            "kind",
        )
        self.model_calls = _family(
            "tickwork_model_calls_total",
            "counter",
            "Model calls today (UTC) that reported (or estimated) usage; restarts at 00:00 UTC.",
            "level",
            "model",
        )
        self.cost = _family(
            "tickwork_cost_usd_total",
            "counter",
            "List value in USD of today's (UTC) spend, as booked, whether billed or on a "
            "subscription; models without a price are left out; restarts at 00:00 UTC.",
            "level",
            "model",
        )
        self.billed = _family(
            "tickwork_billed_usd_total",
            "counter",
            "USD billed for today's (UTC) spend: its list value, less the calls on a "
            "subscription; models without a price are left out; restarts at 00:00 UTC.",
            "level",
            "model",
        )
        self.paused = _family(
            "tickwork_level_paused", "gauge", "1 while a level is paused.", "level"
        )
        self.position = _family(
            "tickwork_store_position", "gauge", "The last global position stored."
        )
        self.lag = _family(
            "tickwork_projection_lag_events",
            "gauge",
            "Events stored but not yet folded into a read model.",
            "projection",
        )
        self.drift = _family(
            "tickwork_reconciliation_drift_ratio",
            "gauge",
            "The largest drift of any day and model of the provider's last `tickwork "
            "reconcile`, ledger against bill (0.03: 3%).",
            "provider",
        )
        self.drifted = _family(
            "tickwork_reconciliation_rows_drifted",
            "gauge",
            "Days x models of the provider's last `tickwork reconcile` past its tolerance.",
            "provider",
        )
        self.reconciled = _family(
            "tickwork_reconciliation_checked_timestamp_seconds",
            "gauge",
            "When the provider's last `tickwork reconcile` ran (Unix seconds).",
            "provider",
        )

    def text(self) -> bytes:
        """Bring the read models up to date, then write every family.

        Checkpoints are read before the read models: a fold committed in between makes
        the text newer than its key, and the next scrape, finding the checkpoint moved,
        reads again; the text is never kept under a checkpoint newer than what it shows.
        """
        reads = self.reads.fresh()
        position, checkpoints, behind_by = projection_lag(reads.store, reads.prices)
        levels = tuple(reads.settings.levels)
        ticks_key = (checkpoints["ticks"], levels)
        if self._ticks is None or self._ticks.key != ticks_key:
            self._ticks = _Kept(ticks_key, self._tick_families(levels))
        today = datetime.now(UTC).date()
        spend_key = (checkpoints["spend"], today)
        if self._spend is None or self._spend.key != spend_key:
            self._spend = _Kept(spend_key, self._spend_families(today))
        stopped = paused_levels(reads.store, levels)
        checks = last_reconciliations(reads.store, get_args(Provider))
        return "".join(
            [
                self._ticks.text,
                self._spend.text,
                self.paused(((level,), (int(level in stopped),)) for level in levels),
                self.position([((), (position,))]),
                self.lag(((name,), (behind,)) for name, behind in behind_by.items()),
                self.drift(((c.provider,), (c.max_drift,)) for c in checks),
                self.drifted(((c.provider,), (len(c.drifted),)) for c in checks),
                self.reconciled(((c.provider,), (c.occurred_at.timestamp(),)) for c in checks),
            ]
        ).encode()

    def _tick_families(self, levels: tuple[str, ...]) -> str:
        """Counts, run times, refused calls, ticks in flight, fire lags: the ticks model's."""
        store = self.reads.store
        counters = tick_counters(store)
        counts, runs, caps = counters.statuses, counters.durations, counters.tool_caps
        flying: dict[tuple[str, str], int] = defaultdict(int)
        for tick in ticks_in_flight(store):
            flying[(tick.level, "running" if tick.status == "running" else "queued")] += 1
        in_flight = [
            ((level, state), (flying.pop((level, state), 0),))
            for level in levels
            for state in ("running", "queued")
        ]
        in_flight += [(key, (count,)) for key, count in flying.items()]
        return "".join(
            [
                self.status(((level, status), (n,)) for level, status, n in counts),
                self.durations(
                    ((run.level,), (*run.at_most, run.count, run.count, run.total_seconds))
                    for run in runs
                ),
                self.cap_hits(((level,), (hits,)) for level, hits, _ in caps),
                self.calls_refused(((level,), (calls,)) for level, _, calls in caps),
                self.in_flight(in_flight),
                self.fire_lag(self._fire_lags()),
            ]
        )

    def _fire_lags(self) -> Iterator[tuple[Labels, Values]]:
        """How late the scheduler claimed slots: the claim minus the slot's fire time.

        A jittered slot is late from its fire time (`fire_at`, the slot plus the level's
        jitter), not from the slot. Only first attempts of scheduled slots count (a manual
        tick has no slot, a retry is late on purpose). The latest and the largest lag of
        the recent window per level, as the ticks projection keeps them
        (`projections.fire_lags`): the newest rows of an index, not the log read back.
        """
        lags: dict[str, list[float]] = defaultdict(list)
        for level, lag in fire_lags(self.reads.store, FIRE_LAG_WINDOW):
            lags[level].append(lag)
        for level, values in lags.items():
            yield (level, "last"), (values[0],)
            yield (level, "max"), (max(values),)

    def _spend_families(self, today: date) -> str:
        """Today's spend (UTC): counters that restart at midnight, as `increase()` reads them.

        Not the spend of every day: pricing a row per level, model and day grew with the
        days kept (311 ms CPU a scrape at 1,000 levels after 30 days, 81 ms after one).
        """
        rows = [
            ((row.group["level"], row.group["model"]), row)
            for row in self.reads.spend(by=("level", "model"), since=today)
        ]
        return "".join(
            [
                self.tokens(
                    ((*pair, kind), (count,))
                    for pair, row in rows
                    for kind, count in (
                        ("prompt", row.prompt_tokens),
                        ("completion", row.completion_tokens),
                    )
                ),
                self.model_calls((pair, (row.model_calls,)) for pair, row in rows),
                self.cost(
                    (pair, (row.cost_usd,)) for pair, row in rows if row.cost_usd is not None
                ),
                self.billed(
                    (pair, (row.billed_usd,)) for pair, row in rows if row.billed_usd is not None
                ),
            ]
        )
