"""USD cost of model calls: the catalog's target prices, `[prices]`, then genai-prices.

A call's price is looked up in that order (`PriceBook.price_of`): the prices of the catalog
target it was booked on, when the target has some and still runs the call's model; the
`[prices."MODEL"]` table of tickwork.toml; genai-prices' tables. Else it is unpriced,
None and never 0. Every lookup names the source that answered (`source`), so a report
can say why a cost is what it is.

genai-prices takes ~90 µs a call, far too slow to price a million events in a rebuild, so
each (model, day) is looked up once and turned into plain float rates. Prices are linear
within a tier (genai-prices' threshold tiers, on a request's input tokens, apply to all its
tokens), so the spend read model keeps exact integer token sums per tier: a call is booked
at its price (`call_price`, looked up when its tick is prepared), and the sums can be
priced under another card (`under`) or today's (a rebuild with `reprice`) without
touching an event. A test holds this arithmetic equal to genai-prices' own. Unknown
models cost None, never 0.

A fold in a worker process cannot look prices up (loading genai-prices costs it a third
of a second): it sums calls per bucket of prompt size between `tier_bounds`, every
threshold of every model, and the bucket's tier is looked up when the sums are written.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from functools import cache
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from harness.contracts import CallPrice, Rates, UsageParts, rates_at, usd

if TYPE_CHECKING:
    from harness.config import PriceOverride, Settings

_PRICE_KEYS = (
    "input_mtok",
    "output_mtok",
    "cache_read_mtok",
    "cache_write_mtok",
    "cache_write_1h_mtok",
    "web_searches_kcount",
)


UNPRICED = "unpriced"
"""The source of a model no source prices."""
CARD = "card"
"""The source of a price read from a price card given to a what-if report (`PriceBook.under`)."""


@dataclass(frozen=True, slots=True)
class Priced:
    """A model's tier ladder on a day (None: unpriced) and the source it came from."""

    ladder: tuple[Rates, ...] | None
    source: str


@dataclass(frozen=True, slots=True)
class TargetPrices:
    """A catalog target's prices, for the calls booked on it while it runs `model`.

    A target whose model was changed in the catalog since does not price the old model's
    calls: those fall through to `[prices]` and genai-prices.
    """

    model: str
    prices: PriceOverride


def _rate(price: Any, start: int | None) -> float | None:
    """A price key's rate when the request's input exceeds `start` (None: below every tier)."""
    if price is None:
        return None
    if isinstance(price, Decimal):
        return float(price)
    applicable = price.base
    for tier in price.tiers:
        if start is not None and tier.start <= start:
            applicable = tier.price
    return float(applicable)


def _ladder(model_price: Any) -> tuple[Rates, ...]:
    """Rates for each threshold any of the model's prices has, lowest first."""
    prices = [getattr(model_price, key, None) for key in _PRICE_KEYS]
    starts = sorted({tier.start for p in prices for tier in getattr(p, "tiers", ())})
    ladder = []
    for start in [None, *starts]:
        input_rate, output_rate, cache_read, cache_write, hour, searches = (
            _rate(p, start) for p in prices
        )
        above = -1 if start is None else start
        ladder.append(
            Rates(
                above,
                input_rate or 0.0,
                output_rate or 0.0,
                cache_read,
                cache_write,
                cache_write_1h=hour,
                web_search=None if searches is None else searches / 1000,
            )
        )
    return tuple(ladder)


def _flat(prices: PriceOverride) -> tuple[Rates, ...]:
    """An operator's prices as a ladder of one rate (they have no tiers)."""
    return (
        Rates(
            -1,
            prices.input_per_mtok,
            prices.output_per_mtok,
            prices.cache_read_per_mtok,
            prices.cache_write_per_mtok,
            prices.per_request_usd,
            prices.cache_write_1h_per_mtok,
            prices.web_search_usd,
        ),
    )


class PriceBook:
    """Prices per model, day and target, cached; the one place that knows where prices come from.

    `overrides`: tickwork.toml's `[prices]`, by model. `targets`: the catalog's targets
    that have `prices`, by target id (`harness.routing.price_book` reads them).
    """

    def __init__(
        self,
        overrides: Mapping[str, PriceOverride] | None = None,
        targets: Mapping[str, TargetPrices] | None = None,
        card: Mapping[str, PriceOverride] | None = None,
    ) -> None:
        self._overrides = dict(overrides or {})
        self._targets = dict(targets or {})
        self._card = dict(card or {})
        self._cache: dict[tuple[str, str, str | None], Priced] = {}
        self._calls: dict[tuple[str, str, str | None], CallPrice] = {}

    def under(self, card: Mapping[str, PriceOverride]) -> PriceBook:
        """This book with `card`'s prices first (source `card`): what-if pricing of history.

        A model the card leaves out keeps the price this book gives it.
        """
        return PriceBook(self._overrides, self._targets, card)

    def price_of(self, model: str, day: str, target: str | None = None) -> Priced:
        """The ladder for `model` on `day` (YYYY-MM-DD) booked on `target`, and its source."""
        own = self._targets.get(target) if target else None
        key = (model, day, target if own is not None and own.model == model else None)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._lookup(model, day, key[2])
        return found

    def rates(self, model: str, day: str, target: str | None = None) -> tuple[Rates, ...] | None:
        """The tier ladder for `model` on `day` (YYYY-MM-DD), or None when unpriced."""
        return self.price_of(model, day, target).ladder

    def source(self, model: str, day: str, target: str | None = None) -> str:
        """Who prices the call: `catalog:<target>`, `config`, `genai-prices@<v>`, `unpriced`."""
        return self.price_of(model, day, target).source

    def _lookup(self, model: str, day: str, target: str | None) -> Priced:
        if model in self._card:
            return Priced(_flat(self._card[model]), CARD)
        if target is not None:
            return Priced(_flat(self._targets[target].prices), f"catalog:{target}")
        override = self._overrides.get(model)
        if override is not None:
            return Priced(_flat(override), "config")
        ladder = _genai_ladder(model, day)
        return Priced(ladder, UNPRICED if ladder is None else _genai_source())

    def call_price(self, model: str, day: str, target: str | None = None) -> CallPrice:
        """The price a worker books `model`'s calls on `target` at, looked up once a tick."""
        key = (model, day, target)
        price = self._calls.get(key)
        if price is None:
            found = self.price_of(model, day, target)
            price = CallPrice(model=model, target=target, source=found.source, ladder=found.ladder)
            self._calls[key] = price
        return price

    def thresholds(self, model: str, day: str) -> tuple[int, ...]:
        """Input-token thresholds above which the model's rates change (none: one rate).

        A call's tier is the highest threshold its prompt exceeds (-1 below them all);
        calls of one tier add linearly, so the spend read model sums tokens per tier.
        The model's own (its `[prices]` or genai-prices'), whatever target it ran on: a
        target's prices have one rate, which prices every tier alike, so a tier kept in
        a read model stays right when the catalog changes.
        """
        ladder = self.rates(model, day)
        return () if ladder is None else tuple(step.above for step in ladder[1:])

    def tier_bounds(self) -> tuple[int, ...]:
        """Every threshold at which any model's rates change, on any day, lowest first.

        Each model's `thresholds` are among them, so two prompt sizes with no bound between
        them are in one tier of every model: a fold may sum calls per bucket between the
        bounds and learn each bucket's tier later (`bucket_tier`). Overrides have one rate.
        """
        return _snapshot_tier_bounds()

    def bucket_tier(self, model: str, day: str, bucket: int) -> int:
        """The tier of every call of `model` on `day` whose prompt lies in bucket `bucket`.

        Bucket b holds the prompt sizes above bound b - 1 up to bound b (`bisect_left`);
        their tier is that of the smallest of them. A model threshold that is not a bound
        would split a bucket between two tiers: that is refused, never summed wrongly.
        """
        thresholds = self.thresholds(model, day)
        if not thresholds or bucket == 0:
            return -1
        bounds = self.tier_bounds()
        if not set(thresholds) <= set(bounds):
            raise ValueError(
                f"{model} on {day}: price thresholds {thresholds} are not all among the "
                f"tier bounds {bounds}; genai-prices' tables have a shape tickwork does not read"
            )
        return tier_of(bounds[bucket - 1] + 1, thresholds)

    def tier(self, model: str, day: str, prompt_tokens: int) -> int:
        """The price tier of one call: the highest threshold its prompt exceeds, else -1."""
        return tier_of(prompt_tokens, self.thresholds(model, day))

    def cost(
        self,
        model: str,
        day: str,
        tier: int,
        prompt_tokens: int,
        completion_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        *,
        requests: int = 0,
        target: str | None = None,
        cache_write_1h_tokens: int = 0,
        web_searches: int = 0,
    ) -> float | None:
        """USD for calls of one tier (summed tokens are fine: prices are linear in a tier).

        `prompt_tokens` includes cached tokens, as OpenAI-compatible servers report it.
        `requests`: how many calls the tokens are of, for a price per request.
        `cache_write_1h_tokens`: of the cache writes, those held for an hour, at their own
        rate; `web_search_requests`: server-side searches, at their price each.
        """
        ladder = self.rates(model, day, target)
        if ladder is None:
            return None
        usage = UsageParts(
            prompt_tokens,
            completion_tokens,
            cache_read_tokens,
            cache_write_tokens,
            cache_write_1h_tokens,
            web_searches,
            requests,
        )
        return usd(rates_at(ladder, tier), usage)


def _genai_ladder(model: str, day: str) -> tuple[Rates, ...] | None:
    """genai-prices' ladder for the model on the day (its price at noon UTC), None if unknown."""
    from genai_prices import Usage, calc_price

    when = datetime.combine(date.fromisoformat(day), time(12), tzinfo=UTC)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = calc_price(
                Usage(input_tokens=1, output_tokens=1), model, genai_request_timestamp=when
            )
    except LookupError:
        return None
    return _ladder(found.model_price)


@cache
def _genai_source() -> str:
    """genai-prices with the version whose tables priced the call."""
    return f"genai-prices@{version('genai-prices')}"


def tick_cost(
    prices: PriceBook,
    model: str | None,
    day: str,
    prompt_tokens: int,
    completion_tokens: int,
    model_calls: int,
) -> float | None:
    """USD of a tick from its totals, as lists show it beside each tick.

    A tick row keeps sums, not calls, so every call is priced at the tier of the average
    call: exact for the many models with one rate, close for tiered ones (the spend read
    model prices each call at its own tier). None: no model, or an unpriced one.
    """
    if model is None:
        return None
    average = prompt_tokens // max(model_calls, 1)
    tier = prices.tier(model, day, average)
    return prices.cost(model, day, tier, prompt_tokens, completion_tokens)


@cache
def _snapshot_tier_bounds() -> tuple[int, ...]:
    """`PriceBook.tier_bounds`, read once a process: the snapshot's tables do not change.

    Walking every model of every provider costs about 8 ms of CPU, and every fold of the
    spend read models builds its kernel from a price book of its own.
    """
    from genai_prices.data_snapshot import get_snapshot

    starts = {
        start
        for provider in get_snapshot().providers
        for model in provider.models
        for start in _tier_starts(model)
    }
    return tuple(sorted(starts))


def _tier_starts(model: Any) -> Iterator[int]:
    """The tier thresholds of every price a genai-prices model lists, on any day.

    Dated, conditional and per-request variants alike: a superset of the thresholds that
    any one day uses does no harm.
    """
    listed = model.prices if isinstance(model.prices, list) else [model.prices]
    for price in [*listed, *(model.price_variants or ())]:
        for value in vars(getattr(price, "prices", price)).values():
            yield from (tier.start for tier in getattr(value, "tiers", ()))


def tier_of(prompt_tokens: int, thresholds: tuple[int, ...]) -> int:
    """The highest tier threshold the prompt passes (-1: the base tier), to pick a tier's rates."""
    tier = -1
    for above in thresholds:
        if prompt_tokens > above:
            tier = above
    return tier


def format_usd(cost: float | None) -> str:
    """A cost for people: cents from a dollar up, three significant digits below one.

    Ticks on small models cost fractions of a cent: with a fixed four decimals a tick of
    $0.0000402 read `0.0000`, as if it were free, while the JSON said `4.02e-05`.
    Never in scientific notation; None (an unpriced model) reads `unpriced`.
    """
    if cost is None:
        return "unpriced"
    if cost == 0 or abs(cost) >= 1:
        return f"{cost:,.2f}"
    exponent = Decimal(repr(abs(cost))).adjusted()
    return f"{cost:.{max(2, 2 - exponent)}f}"


def refuse_unpayable_budgets(
    settings: Settings, where: str, day: str, routed: Collection[str]
) -> None:
    """Refuse a USD budget below one tick's reservation of a level it covers, priced on `day`.

    The configuration refuses such token limits as it loads; a USD limit needs the level
    model's price, known from this layer on. Levels without a price say nothing, nor do
    those in `routed`, the lanes of the catalog in force: their targets run, not their
    model (names only: routing, which knows the catalog, builds on this module).

    Raises:
        ConfigError: naming `where`, each budget's path, the level and both amounts.
    """
    # Here, not at the top: a tick prices its calls with this module and never loads the
    # configuration's models (pydantic-settings, the schedules' triggers: ~35 ms a start).
    from harness.config import ConfigError, unpayable

    if all(entry.usd is None and entry.list_usd is None for entry in settings.budget_entries()):
        return
    book = PriceBook(settings.prices)
    problems = list(
        unpayable(
            settings.budgets,
            settings.levels,
            lambda model, tokens: book.cost(model, day, -1, tokens, 0),
            routed,
        )
    )
    if problems:
        lines = "\n".join(f"  {problem}" for problem in problems)
        raise ConfigError(f"{where}: invalid configuration\n{lines}")
