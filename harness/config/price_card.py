"""A price card: a TOML file of `[prices."MODEL"]` tables, to reprice spent history with.

The form of tickwork.toml's `[prices]`, read apart from the configuration: `tickwork spend
--prices FILE` prints what a period would have cost under it beside what was booked.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from harness.config.settings import ConfigError, PriceOverride, _Strict, read_toml
from harness.config.wording import describe


class PriceCard(_Strict):
    """A price card file: its `[prices]` alone."""

    prices: dict[str, PriceOverride] = {}


def load_price_card(path: Path) -> dict[str, PriceOverride]:
    """The card's prices by model.

    Raises:
        ConfigError: naming the file and each bad key's path.
    """
    data = read_toml(path, "price card")
    try:
        card = PriceCard(**data)
    except ValidationError as exc:
        lines = "\n".join(f"  {describe(err, PriceCard)}" for err in exc.errors())
        raise ConfigError(f"{path}: invalid price card\n{lines}") from exc
    if not card.prices:
        raise ConfigError(f'{path}: a price card holds [prices."MODEL"] tables; this has none')
    return card.prices
