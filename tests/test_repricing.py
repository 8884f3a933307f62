"""Money re-derivable from the events: a month of spend repriced under another card.

`tickwork spend --prices FILE` prints beside each row what its calls would have cost under
the card; `tickwork projections rebuild --reprice` rewrites the spend read model under
today's prices. Both are checked against sums worked out here, call by call, from the
events themselves; neither changes an event. Spend booked before calls were priced as
they were booked still reads, priced when read and counted as such. Beside what calls
are worth, what they were billed: nothing for a call on a subscription.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness.contracts import BudgetSpent
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.prices import format_usd
from harness.projections.spend import GROUPS, REPORT_GROUPS
from harness.store import open_store
from tests.commands import forked, forked_each, write_config
from tests.store_support import migrated_sqlite
from tests.test_routing import Routed, of_type, target, write_catalog

OCTOBER = range(1, 32)
CONFIG_PRICES = '[prices."m-a"]\ninput_per_mtok = 2.0\noutput_per_mtok = 4.0\n'
"""Today's [prices]: m-a was booked at 1 and 2 in October; m-b has no price."""
CARD = """
[prices."m-a"]
input_per_mtok = 3.0
output_per_mtok = 6.0
[prices."m-b"]
input_per_mtok = 1.0
output_per_mtok = 2.0
cache_read_per_mtok = 0.1
cache_write_per_mtok = 1.25
cache_write_1h_per_mtok = 2.0
web_search_usd = 0.01
"""


def october(tmp_path: Path) -> list[BudgetSpent]:
    """A month of calls, stored in the store of a tickwork.toml with today's [prices].

    m-a booked by config (some booked before prices were recorded), m-b booked unpriced,
    with cache reads, 5-minute and 1-hour writes and searches.
    """
    spent = []
    for day in OCTOBER:
        at = datetime(2026, 10, day, 12, tzinfo=UTC)
        prompt, completion = 1_000 + 37 * day, 50 + day
        booked = (prompt * 1.0 + completion * 2.0) / 1e6
        common = {"tick_id": f"t{day}", "level": "min", "occurred_at": at}
        spent.append(
            BudgetSpent(
                **common,
                model="m-a",
                prompt_tokens=prompt,
                completion_tokens=completion,
                cost_usd=booked,
                price_source="config",
            )
        )
        if day % 3 == 0:
            spent.append(
                BudgetSpent(**common, model="m-a", prompt_tokens=500, completion_tokens=20)
            )
        spent.append(
            BudgetSpent(
                **common,
                model="m-b",
                prompt_tokens=2_000 + day,
                completion_tokens=100,
                cache_read_tokens=300,
                cache_write_tokens=200,
                cache_write_1h_tokens=50,
                web_search_requests=1,
                price_source="unpriced",
            )
        )
    url = migrated_sqlite(tmp_path)
    write_config(tmp_path, CONFIG_PRICES, store_url=url)
    store = open_store(url)
    store.append("spend-october", [event.to_record() for event in spent])
    store.close()
    return spent


def card_cost(spent: BudgetSpent) -> float:
    """One call under CARD, by hand."""
    if spent.model == "m-a":
        return (spent.prompt_tokens * 3.0 + spent.completion_tokens * 6.0) / 1e6
    uncached = spent.prompt_tokens - 300 - 200
    tokens = uncached * 1.0 + spent.completion_tokens * 2.0 + 300 * 0.1 + 150 * 1.25 + 50 * 2.0
    return tokens / 1e6 + 0.01


def test_a_month_repriced_under_a_card_and_rebuilt_under_todays_prices_matches_the_events(
    tmp_path: Path,
) -> None:
    spent = october(tmp_path)
    (tmp_path / "card.toml").write_text(CARD)
    (tmp_path / "bad.toml").write_text('[prices."m-a"]\ninput_per_mtok = -1\noutput_per_mtok = 1\n')
    report = ["spend", "--by", "model", "--since", "2026-10-01", "--json"]
    events = ["events", "--json", "--type", "BudgetSpent"]
    before = forked(tmp_path, *report)  # caught up: the reports below only read
    what_if, table, bad, logged = forked_each(
        tmp_path,
        [
            [*report, "--prices", "card.toml"],
            [*report[:-1], "--prices", "card.toml"],
            [*report, "--prices", "bad.toml"],
            events,
        ],
    )
    assert what_if.returncode == 0, what_if.stderr
    rows = {row["group"]["model"]: row for row in json.loads(what_if.stdout)}
    of = {model: [s for s in spent if s.model == model] for model in ("m-a", "m-b")}
    legacy = [s for s in of["m-a"] if s.cost_usd is None]
    as_booked = sum(s.cost_usd or 0.0 for s in of["m-a"]) + sum(
        (s.prompt_tokens * 2.0 + s.completion_tokens * 4.0) / 1e6 for s in legacy
    )
    assert rows["m-a"]["cost_usd"] == pytest.approx(as_booked, rel=1e-9)
    assert rows["m-a"]["priced_when_read"] == len(legacy) == 10
    assert rows["m-a"]["price_sources"] == ["config"]
    assert rows["m-a"]["card_usd"] == pytest.approx(sum(map(card_cost, of["m-a"])), rel=1e-9)
    assert (rows["m-b"]["cost_usd"], rows["m-b"]["unpriced_calls"]) == (None, 31)
    assert rows["m-b"]["card_usd"] == pytest.approx(sum(map(card_cost, of["m-b"])), rel=1e-9)
    assert rows["m-b"]["card_price_sources"] == ["card"]
    assert json.loads(before.stdout)[0]["cost_usd"] == rows["m-a"]["cost_usd"]
    card_usd = f"{rows['m-b']['card_usd']:.3f}"
    assert table.returncode == 0 and "under" in table.stdout and card_usd in table.stdout
    assert bad.returncode == 2 and "bad.toml" in bad.stderr, bad.stderr
    assert "prices.m-a.input_per_mtok" in bad.stderr, bad.stderr

    (tmp_path / "tickwork.toml").write_text(
        (tmp_path / "tickwork.toml").read_text() + CARD.replace("m-a", "m-c")
    )
    rebuilt = forked(tmp_path, "projections", "rebuild", "spend", "--reprice")
    repriced, logged_after = forked_each(tmp_path, [report, events])
    assert rebuilt.returncode == 0, rebuilt.stderr
    rows = {row["group"]["model"]: row for row in json.loads(repriced.stdout)}
    today = sum((s.prompt_tokens * 2.0 + s.completion_tokens * 4.0) / 1e6 for s in of["m-a"])
    assert rows["m-a"]["cost_usd"] == pytest.approx(today, rel=1e-9)
    assert rows["m-a"]["priced_when_read"] == 0
    assert rows["m-b"]["cost_usd"] == pytest.approx(sum(map(card_cost, of["m-b"])), rel=1e-9)
    assert rows["m-b"]["price_sources"] == ["config"]
    assert logged_after.stdout == logged.stdout, "no event changed"


PLAN = {"input_per_mtok": 2.0, "output_per_mtok": 4.0}


def test_a_subscription_tick_books_its_list_value_and_is_billed_nothing(
    tmp_path: Path, sqlite_url: str, fake: FakeUpstream
) -> None:
    """A target on a plan: its calls keep their tokens and list value, and add 0 to the bill.

    The level's own `billing` wins over its target's.
    """
    plan = {**target(fake.url, "plan-model"), "prices": PLAN, "billing": "subscription"}
    catalog = write_catalog(tmp_path / "catalog.json", {"plan": plan}, ["plan"])
    outcome, events = Routed(tmp_path, sqlite_url, catalog).tick(fake, [Step(text="Quiet.")])
    assert outcome.status == "completed", outcome.reason
    (started,) = of_type(events, "ModelCallStarted")
    (spent,) = of_type(events, "BudgetSpent")
    worth = (spent["prompt_tokens"] * 2.0 + spent["completion_tokens"] * 4.0) / 1e6
    assert spent["prompt_tokens"] > 0 and spent["completion_tokens"] > 0
    assert (spent["billing"], started["billing"]) == ("subscription", "subscription")
    assert spent["cost_usd"] == pytest.approx(worth, rel=1e-12)
    assert spent["price_source"] == "catalog:plan"

    write_config(tmp_path, f'[routing]\ncatalog = "{catalog}"\n', store_url=sqlite_url)
    report = ["spend", "--by", "target", "--since", "2020-01-01"]
    by_billing = ["spend", "--by", "billing", "--since", "2020-01-01", "--json"]
    as_json, table, shown, billed = forked_each(
        tmp_path,
        [[*report, "--json"], report, ["show", outcome.tick_id, "--spend", "--json"], by_billing],
    )
    assert (*GROUPS, "tag") == REPORT_GROUPS, "a report groups by every group of the read model"
    assert billed.returncode == 0, billed.stderr
    assert [row["group"] for row in json.loads(billed.stdout)] == [{"billing": "subscription"}]
    assert as_json.returncode == 0, as_json.stderr
    (row,) = json.loads(as_json.stdout)
    assert row["group"] == {"target": "plan"}
    assert row["cost_usd"] == pytest.approx(worth, rel=1e-9)
    assert (row["billed_usd"], row["subscription_calls"]) == (0.0, 1)
    heading, line, *_ = (line.split() for line in table.stdout.splitlines())
    assert heading[5:9] == ["list", "USD", "billed", "USD"], table.stdout
    assert line[:1] + line[5:7] == ["plan", format_usd(worth), "0.00"], table.stdout
    (call,) = json.loads(shown.stdout)["calls"]
    assert (call["billing"], call["billed_usd"]) == ("subscription", 0.0)
    assert call["usd"] == pytest.approx(worth, rel=1e-12)

    metered = Routed(tmp_path, sqlite_url, catalog, billing="api").preparer.prepare("min")
    assert [price.billing for price in metered.payload.prices] == ["api"]


def test_billed_and_list_usd_are_rebuilt_from_the_events_and_repriced_apart(
    tmp_path: Path,
) -> None:
    """List value and billed USD per row, whatever priced the calls.

    As booked, priced when read, rebuilt from zero, repriced under today's prices or
    under a card. Spend recorded before billing was is billed as `api`.
    """
    at = datetime(2026, 10, 5, 12, tzinfo=UTC)
    common = {"level": "min", "model": "m-a", "occurred_at": at}
    booked = {"price_source": "config"}
    spent = [
        BudgetSpent(
            **common,
            tick_id="t1",
            prompt_tokens=1_000,
            completion_tokens=100,
            cost_usd=0.0012,
            **booked,
        ),
        BudgetSpent(
            **common,
            tick_id="t2",
            prompt_tokens=2_000,
            completion_tokens=200,
            cost_usd=0.0024,
            billing="subscription",
            **booked,
        ),
        BudgetSpent(
            **common,
            tick_id="t3",
            prompt_tokens=3_000,
            completion_tokens=300,
            billing="subscription",
        ),
        BudgetSpent(**common, tick_id="t4", prompt_tokens=500, completion_tokens=50),
    ]
    records = [event.to_record() for event in spent]
    del records[3].data["billing"]  # recorded before tickwork kept billing
    url = migrated_sqlite(tmp_path)
    write_config(tmp_path, CONFIG_PRICES, store_url=url)
    (tmp_path / "card.toml").write_text(CARD)
    store = open_store(url)
    store.append("spend-billing", records)
    store.close()
    report = ["spend", "--since", "2026-10-01", "--json"]

    def figures(output: str) -> tuple[float, float]:
        (row,) = json.loads(output)
        return row["cost_usd"], row["billed_usd"]

    folded = forked(tmp_path, *report)
    assert folded.returncode == 0, folded.stderr
    # Today's [prices] price t3 and t4 (booked unpriced) at 2 and 4 per million.
    now_priced = {"t3": (3_000 * 2.0 + 300 * 4.0) / 1e6, "t4": (500 * 2.0 + 50 * 4.0) / 1e6}
    assert figures(folded.stdout) == pytest.approx(
        (0.0012 + 0.0024 + now_priced["t3"] + now_priced["t4"], 0.0012 + now_priced["t4"])
    )
    rebuilt = forked(tmp_path, "projections", "rebuild", "spend")
    again = forked(tmp_path, *report)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(folded.stdout)

    today = {s.tick_id: (s.prompt_tokens * 2.0 + s.completion_tokens * 4.0) / 1e6 for s in spent}
    card = {s.tick_id: (s.prompt_tokens * 3.0 + s.completion_tokens * 6.0) / 1e6 for s in spent}
    assert forked(tmp_path, "projections", "rebuild", "spend", "--reprice").returncode == 0
    repriced, under = forked_each(tmp_path, [report, [*report, "--prices", "card.toml"]])
    assert figures(repriced.stdout) == pytest.approx(
        (sum(today.values()), today["t1"] + today["t4"])
    )
    (row,) = json.loads(under.stdout)
    assert (row["card_usd"], row["card_billed_usd"]) == pytest.approx(
        (sum(card.values()), card["t1"] + card["t4"])
    )
