"""`tickwork reconcile`: the ledger beside a provider's exported bill, day by day and model.

Real `tickwork` processes (forked from this warm process: the command, not its start-up,
is the point) on a real SQLite store holding `BudgetSpent` events; the exports are the
samples in tests/data (made in the providers' documented shapes).
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.api.metrics import Exposition
from harness.api.reads import Reads
from harness.config import load_settings
from harness.contracts import BudgetSpent
from harness.store import SqlEventStore, open_store
from tests.commands import forked, write_config

DATA = Path(__file__).parent / "data"

PRICES = """
[prices."gpt-4o-mini"]
input_per_mtok = 0.15
output_per_mtok = 0.60
cache_read_per_mtok = 0.075
[prices."o4-mini"]
input_per_mtok = 1.10
output_per_mtok = 4.40
cache_read_per_mtok = 0.275
[prices."claude-sonnet-4-5"]
input_per_mtok = 3.0
output_per_mtok = 15.0
cache_read_per_mtok = 0.30
cache_write_per_mtok = 3.75
"""

LEDGER = [
    # day, model, prompt (cached included), cached read, cache write, completion
    ("2026-11-27", "gpt-4o-mini", 9_000_000, 0, 0, 9_000_000),  # before the bill's days
    ("2026-11-28", "gpt-4o-mini", 1_500_000, 400_000, 0, 300_000),
    ("2026-11-28", "gpt-4o-mini", 500_000, 0, 0, 200_000),
    ("2026-11-29", "gpt-4o-mini", 1_000_000, 0, 0, 200_000),
    ("2026-11-29", "o4-mini", 100_000, 0, 0, 50_000),
    ("2026-11-29", "qwen2.5-32b-instruct", 7_000_000, 0, 0, 1_000),  # another provider's
    ("2026-11-30", "gpt-4o-mini", 3_000_000, 1_000_000, 0, 1_000_000),
    ("2026-12-01", "gpt-4o-mini", 9_000_000, 0, 0, 9_000_000),  # after them
    ("2026-11-28", "claude-sonnet-4-5", 550_000, 400_000, 50_000, 20_000),
    ("2026-11-29", "claude-sonnet-4-5", 200_000, 0, 0, 10_000),
]
ON_A_PLAN = ("2026-11-28", "claude-sonnet-4-5", 800_000, 0, 0, 40_000)
"""Claude Code on a subscription: worth its list price, on no API bill."""


@pytest.fixture
def ledger(tmp_path: Path) -> tuple[Path, SqlEventStore]:
    """A configuration whose store holds LEDGER's calls, the same as the samples' bills."""
    config = write_config(tmp_path, PRICES)
    store = open_store(load_settings(config).store.url)
    for n, (day, model, prompt, read, write, completion) in enumerate([*LEDGER, ON_A_PLAN]):
        spent = BudgetSpent(
            tick_id=f"t{n}",
            level="min",
            model=model,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cache_read_tokens=read,
            cache_write_tokens=write,
            occurred_at=datetime.fromisoformat(f"{day}T12:00:00+00:00"),
            billing="subscription" if n == len(LEDGER) else "api",
        )
        store.append(f"tick-t{n}", [spent.to_record()])
    return config, store


def reconcile(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forked(config.parent, "--config", str(config), "reconcile", *args)


def checks(store: SqlEventStore) -> list[dict[str, object]]:
    return [e.data for e in store.read_all(0, 1000, ["ReconciliationChecked"])]


def test_an_openai_export_equal_to_the_ledger_exits_0_and_the_check_is_stored(
    ledger: tuple[Path, SqlEventStore],
) -> None:
    """Usage and costs files together; other days and other providers' models stay out."""
    config, store = ledger
    done = reconcile(config, str(DATA / "openai_usage.json"), str(DATA / "openai_costs.json"))
    assert done.returncode == 0, done.stderr
    report = json.loads(
        reconcile(
            config, str(DATA / "openai_usage.json"), str(DATA / "openai_costs.json"), "--json"
        ).stdout
    )
    assert report["provider"] == "openai" and report["drifted"] == []
    rows = {(row["day"], row["model"]): row for row in report["rows"]}
    assert set(rows) == {
        ("2026-11-28", "gpt-4o-mini"),
        ("2026-11-29", "gpt-4o-mini"),
        ("2026-11-29", "o4-mini"),
        ("2026-11-30", "gpt-4o-mini"),
    }
    first = rows[("2026-11-28", "gpt-4o-mini")]
    assert first["provider_tokens"] == first["ledger_tokens"] == 2_500_000
    assert first["provider_usd"] == pytest.approx(0.57)
    assert first["ledger_usd"] == pytest.approx(0.57)
    assert all(row["drift"] == pytest.approx(0) for row in rows.values())
    (stored, _) = checks(store)
    assert (stored["provider"], stored["rows"], stored["max_drift"]) == ("openai", 4, 0.0)
    assert (stored["first_day"], stored["last_day"]) == ("2026-11-28", "2026-11-30")


def test_a_day_off_by_3_percent_exits_1_naming_the_day_and_model(
    ledger: tuple[Path, SqlEventStore],
) -> None:
    config, store = ledger
    drifting = reconcile(config, str(DATA / "openai_usage_drift.json"), "--tolerance", "0.5%")
    assert drifting.returncode == 1, drifting.stderr
    assert "2026-11-29 gpt-4o-mini (-2.91%)" in drifting.stderr
    assert "2026-11-28" not in drifting.stderr and "o4-mini" not in drifting.stderr
    assert "-2.91%" in drifting.stdout and "1,236,000" in drifting.stdout
    tolerant = reconcile(config, str(DATA / "openai_usage_drift.json"), "--tolerance", "0.03")
    assert tolerant.returncode == 0, tolerant.stderr
    failed, passed = checks(store)
    assert failed["max_drift"] == pytest.approx(36_000 / 1_236_000)
    assert [(row["day"], row["model"]) for row in failed["drifted"]] == [
        ("2026-11-29", "gpt-4o-mini")
    ]
    assert passed["drifted"] == [] and passed["tolerance"] == 0.03


def test_an_anthropic_export_is_told_by_its_shape_and_reconciles_with_cache_tokens(
    ledger: tuple[Path, SqlEventStore],
) -> None:
    """Cache reads and writes count as input on both sides; a web search names no model.

    The day's call on a subscription is on no API bill: neither its tokens nor its worth.
    """
    config, _ = ledger
    files = [str(DATA / "anthropic_usage.json"), str(DATA / "anthropic_costs.json")]
    done = reconcile(config, *files, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["provider"] == "anthropic"
    first, second = report["rows"]
    assert (first["day"], first["model"]) == ("2026-11-28", "claude-sonnet-4-5")
    assert first["provider_tokens"] == first["ledger_tokens"] == 570_000
    assert first["provider_usd"] == pytest.approx(0.9075)
    assert first["ledger_usd"] == pytest.approx(0.9075)
    assert second["provider_usd"] == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("console_usage.csv", [], "not JSON (a console CSV? export the admin API's JSON)"),
        ("not_an_export.json", [], "usage or cost export: data.0.starting_at: Field required"),
        ("truncated.json", [], "not JSON: "),
        ("empty.json", [], "no bucket in the export"),
        ("anthropic_usage.json", ["--provider", "openai"], "an export of anthropic, not of openai"),
        ("two_days.json", [], "is not within one UTC day"),
        ("ungrouped.json", [], "no model: export with group_by=model"),
    ],
)
def test_bad_input_exits_2_naming_the_file_and_stores_nothing(
    ledger: tuple[Path, SqlEventStore],
    tmp_path: Path,
    name: str,
    options: list[str],
    expected: str,
) -> None:
    config, store = ledger
    sample = json.loads((DATA / "openai_usage.json").read_text())
    made = {
        "truncated.json": (DATA / "openai_usage.json").read_text()[:300],
        "empty.json": json.dumps({"data": [], "has_more": False}),
        "two_days.json": json.dumps(
            {
                **sample,
                "data": [{**sample["data"][0], "end_time": sample["data"][0]["end_time"] + 1}],
            }
        ),
        "ungrouped.json": json.dumps(
            {
                **sample,
                "data": [
                    {
                        **sample["data"][0],
                        "results": [{**sample["data"][0]["results"][0], "model": None}],
                    }
                ],
            }
        ),
    }
    path = DATA / name
    if name in made:
        path = tmp_path / name
        path.write_text(made[name])
    before = store.last_position()
    refused = reconcile(config, str(path), *options)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert str(path) in refused.stderr and expected in refused.stderr
    assert store.last_position() == before


def test_metrics_show_each_providers_last_reconciliation(
    ledger: tuple[Path, SqlEventStore],
) -> None:
    config, store = ledger
    assert reconcile(config, str(DATA / "openai_usage_drift.json")).returncode == 1
    assert reconcile(config, str(DATA / "anthropic_usage.json")).returncode == 0
    text = Exposition(Reads(load_settings(config), store)).text().decode()
    seen = {
        (sample.name, tuple(sample.labels.values())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert seen[("tickwork_reconciliation_drift_ratio", ("openai",))] == pytest.approx(
        36_000 / 1_236_000
    )
    assert seen[("tickwork_reconciliation_rows_drifted", ("openai",))] == 1
    assert seen[("tickwork_reconciliation_drift_ratio", ("anthropic",))] == 0
    checked = seen[("tickwork_reconciliation_checked_timestamp_seconds", ("anthropic",))]
    assert checked <= datetime.now(UTC).timestamp()
