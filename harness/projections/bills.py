"""A provider's bill as tickwork reads it: tokens and USD per UTC day and model.

The exports are the JSON pages the providers' admin APIs answer, saved as they came:

- OpenAI: `GET /v1/organization/usage/completions` (`group_by=model`), whose results
  count `input_tokens` (cached ones included) and `output_tokens`; and
  `GET /v1/organization/costs` (`group_by=line_item`), whose line items read
  `<model>, <kind>` with the amount in USD.
- Anthropic: `GET /v1/organizations/usage_report/messages` (`group_by[]=model`), whose
  input is `uncached_input_tokens`, `cache_read_input_tokens` and `cache_creation`'s
  5-minute and 1-hour writes; and `GET /v1/organizations/cost_report`
  (`group_by[]=description`), whose `amount` is a decimal string of cents. Costs other
  than tokens (web search, code execution) name no model and are left out: the ledger
  books tokens.

Which provider and which report a file is, is told by its shape. Buckets of any width
(a minute, an hour, a day) count toward the UTC day they lie in. A provider names a
model by its snapshot (`gpt-4o-mini-2024-07-18`, `claude-sonnet-4-5-20250929`) where a
ledger may hold its alias: both sides are compared without the date (`model_family`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, NonNegativeInt, ValidationError

from harness.contracts import Provider

_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


def model_family(model: str) -> str:
    """The model without its snapshot date: what a provider's bill and a ledger share."""
    return _SNAPSHOT.sub("", model)


class BillError(ValueError):
    """A file is not an export tickwork reads; the message names the file and what is wrong."""


class _Loose(BaseModel):
    """A provider's object: the fields read are checked, the others (they add some) kept out."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class _OpenAIUsage(_Loose):
    object: Literal["organization.usage.completions.result"]
    model: str | None = None
    input_tokens: NonNegativeInt
    output_tokens: NonNegativeInt


class _OpenAIAmount(_Loose):
    value: float
    currency: str


class _OpenAICost(_Loose):
    object: Literal["organization.costs.result"]
    amount: _OpenAIAmount
    line_item: str | None = None


class _OpenAIBucket(_Loose):
    object: Literal["bucket"]
    start_time: int
    end_time: int
    results: list[_OpenAIUsage | _OpenAICost]


class _OpenAIPage(_Loose):
    object: Literal["page"]
    data: list[_OpenAIBucket]


class _CacheCreation(_Loose):
    ephemeral_5m_input_tokens: NonNegativeInt = 0
    ephemeral_1h_input_tokens: NonNegativeInt = 0


class _AnthropicUsage(_Loose):
    model: str | None
    uncached_input_tokens: NonNegativeInt
    cache_read_input_tokens: NonNegativeInt = 0
    cache_creation: _CacheCreation = _CacheCreation()
    output_tokens: NonNegativeInt


class _AnthropicCost(_Loose):
    amount: str
    currency: str
    model: str | None = None
    cost_type: str | None = None


class _AnthropicBucket(_Loose):
    starting_at: datetime
    ending_at: datetime
    results: list[_AnthropicCost | _AnthropicUsage]


class _AnthropicReport(_Loose):
    data: list[_AnthropicBucket]


@dataclass
class BillRow:
    """What the provider counted for one day and model family; None: the export has none."""

    tokens: int | None = None
    usd: Decimal | None = None


@dataclass
class Bill:
    """A provider's figures per (UTC day, model family), over the days its buckets cover."""

    provider: Provider
    first_day: date
    last_day: date
    rows: dict[tuple[date, str], BillRow] = field(default_factory=dict)
    has_tokens: bool = False
    has_usd: bool = False

    def add(self, day: date, model: str, tokens: int | None, usd: Decimal | None) -> None:
        """Count a result under its day and model family (usage and costs add up apart)."""
        row = self.rows.setdefault((day, model_family(model)), BillRow())
        if tokens is not None:
            row.tokens = (row.tokens or 0) + tokens
        if usd is not None:
            row.usd = (row.usd or Decimal(0)) + usd


def read_bill(paths: Sequence[Path], provider: Provider | None = None) -> Bill:
    """The bill in one or more exports of one provider (usage and costs may be two files).

    Raises:
        BillError: a file cannot be read, is not JSON, is no export tickwork reads, is not
            grouped by model, or is another provider's than `provider` or the others'.
    """
    parsed = [_parse(path) for path in paths]
    providers = {found for found, _ in parsed}
    if provider is not None and providers != {provider}:
        other = next(iter(providers - {provider}))
        names = ", ".join(str(path) for path, (found, _) in zip(paths, parsed, strict=True))
        raise BillError(f"{names}: an export of {other}, not of {provider} (--provider)")
    if len(providers) > 1:
        raise BillError(f"{', '.join(map(str, paths))}: exports of both openai and anthropic")
    entries = [entry for _, found in parsed for entry in found]
    days = [day for day, *_ in entries]
    if not days:
        raise BillError(f"{', '.join(map(str, paths))}: no bucket in the export: nothing to check")
    bill = Bill(providers.pop(), min(days), max(days))
    for day, model, tokens, usd in entries:
        if model is not None:
            bill.add(day, model, tokens, usd)
            bill.has_tokens |= tokens is not None
            bill.has_usd |= usd is not None
    return bill


_Entry = tuple[date, str | None, int | None, Decimal | None]
"""A bucket's day, and one result's model, tokens or USD (a bucket with none: model None)."""


def _parse(path: Path) -> tuple[Provider, list[_Entry]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BillError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise BillError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        csv = not text.lstrip().startswith(("{", "["))
        hint = " (a console CSV? export the admin API's JSON)" if csv else ""
        raise BillError(f"{path}: not JSON{hint}: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise BillError(
            f"{path}: not a usage or cost export: expected an object with a 'data' list "
            "of buckets (OpenAI's organization usage/costs API, Anthropic's "
            "usage_report/messages or cost_report)"
        )
    if document.get("object") == "page":
        return "openai", list(_openai(path, _validated(path, _OpenAIPage, document)))
    return "anthropic", list(_anthropic(path, _validated(path, _AnthropicReport, document)))


_Shape = TypeVar("_Shape", bound=BaseModel)
_Result = TypeVar("_Result")


def _validated(path: Path, shape: type[_Shape], document: dict[str, Any]) -> _Shape:
    try:
        return shape.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        kind = "an OpenAI" if shape is _OpenAIPage else "an Anthropic"
        raise BillError(
            f"{path}: not {kind} usage or cost export: {where}: {first['msg']}"
            f"{f' (and {exc.error_count() - 1} more)' if exc.error_count() > 1 else ''}"
        ) from exc


def _day_of(path: Path, where: str, start: datetime, end: datetime) -> date:
    """The UTC day a bucket lies in; one spanning two days cannot be split, so it is refused."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if end <= start or start.date() != (end - timedelta(microseconds=1)).date():
        raise BillError(
            f"{path}: {where}: a bucket from {start.isoformat()} to {end.isoformat()} is not "
            "within one UTC day: export with bucket_width 1d, 1h or 1m"
        )
    return start.date()


_Found = tuple[str, int | None, Decimal | None]
"""One result's model, and its tokens or its USD."""


def _walk(
    path: Path,
    buckets: Iterable[tuple[datetime, datetime, Sequence[_Result]]],
    read: Callable[[str, _Result], _Found | None],
) -> Iterator[_Entry]:
    """Each bucket's day, then what `read` finds in each of its results.

    The day comes alone first, so an empty bucket still counts toward the window; `read`
    is told where its result is, for its errors.
    """
    for index, (start, end, results) in enumerate(buckets):
        where = f"data[{index}]"
        day = _day_of(path, where, start, end)
        yield day, None, None, None
        for place, result in enumerate(results):
            found = read(f"{path}: {where}.results[{place}]", result)
            if found is not None:
                yield day, *found


def _openai(path: Path, page: _OpenAIPage) -> Iterator[_Entry]:
    def seconds(at: int) -> datetime:
        return datetime.fromtimestamp(at, UTC)

    buckets = [(seconds(b.start_time), seconds(b.end_time), b.results) for b in page.data]
    return _walk(path, buckets, _openai_result)


def _openai_result(at: str, result: _OpenAIUsage | _OpenAICost) -> _Found:
    if isinstance(result, _OpenAIUsage):
        if result.model is None:
            raise BillError(f"{at}: no model: export with group_by=model")
        return result.model, result.input_tokens + result.output_tokens, None
    if result.amount.currency.lower() != "usd":
        raise BillError(f"{at}: amount in {result.amount.currency}, not usd")
    if result.line_item is None:
        raise BillError(f"{at}: no line item: export with group_by=line_item")
    return result.line_item.rsplit(", ", 1)[0], None, Decimal(repr(result.amount.value))


def _anthropic(path: Path, report: _AnthropicReport) -> Iterator[_Entry]:
    buckets = [(b.starting_at, b.ending_at, b.results) for b in report.data]
    return _walk(path, buckets, _anthropic_result)


def _anthropic_result(at: str, result: _AnthropicCost | _AnthropicUsage) -> _Found | None:
    if isinstance(result, _AnthropicUsage):
        if result.model is None:
            raise BillError(f"{at}: no model: export with group_by[]=model")
        cache = result.cache_creation
        tokens = (
            result.uncached_input_tokens
            + result.cache_read_input_tokens
            + cache.ephemeral_5m_input_tokens
            + cache.ephemeral_1h_input_tokens
            + result.output_tokens
        )
        return result.model, tokens, None
    if result.currency.upper() != "USD":
        raise BillError(f"{at}: amount in {result.currency}, not USD")
    if result.cost_type not in (None, "tokens"):
        return None
    if result.model is None:
        raise BillError(f"{at}: no model: export with group_by[]=description")
    try:
        cents = Decimal(result.amount)
    except InvalidOperation as exc:
        raise BillError(f"{at}.amount: {result.amount!r} is no number") from exc
    return result.model, None, cents / 100
