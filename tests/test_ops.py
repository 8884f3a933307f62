"""What ops/ ships stays true to the code: the example config, the units, the dashboards."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import BaseModel

from harness.config import DigestConfig, LevelConfig, PriceOverride, Settings
from harness.devtools.example_config import example_config
from harness.store import open_store
from tests.api_support import serving, settings_for

OPS = Path(__file__).parents[1] / "ops"


def test_the_ops_example_config_is_what_tickwork_init_writes() -> None:
    assert (OPS / "tickwork.example.toml").read_text(encoding="utf-8") == example_config()


def _keys(model: type[BaseModel], path: str) -> list[tuple[str, str]]:
    found = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            found += _keys(kind, name)
        elif name not in ("levels", "prices", "rate_limits"):
            found.append((path, name))
    return found


def test_the_example_config_mentions_every_option() -> None:
    keys = (
        _keys(Settings, "")
        + _keys(LevelConfig, "levels")
        + _keys(DigestConfig, "digests")
        + _keys(PriceOverride, "prices")
    )
    absent = [
        f"{path}.{name}"
        for path, name in keys
        if (path, name) != ("api", "token")
        and not re.search(rf"^(# )?{name} = ", example_config(), re.MULTILINE)
    ]
    assert absent == []
    assert "TICKWORK_API_TOKEN" in example_config(), "the token's only source is named"
    tomllib.loads(example_config())


def test_the_example_config_says_each_thing_once() -> None:
    """No comment line comes twice: a block pasted twice (a note, a level's keys) fails."""
    said: dict[str, int] = {}
    repeated = []
    for number, line in enumerate(example_config().splitlines(), start=1):
        _, hash_sign, comment = line.partition("#")
        text = " ".join(comment.split())
        if not hash_sign or not text:
            continue
        if text in said:
            repeated.append(f"line {number} repeats line {said[text]}: {text}")
        said.setdefault(text, number)
    assert repeated == []


def test_the_systemd_units_run_tickwork() -> None:
    for command in ("run", "serve", "worker"):
        unit = (OPS / "systemd" / f"tickwork-{command}.service").read_text()
        assert re.search(rf"^ExecStart=\S*tickwork {command}\b", unit, re.MULTILINE), unit
        assert "[Install]" in unit


def exported_series(tmp_path: Path) -> Iterator[str]:
    """Every series name `/metrics` can export, from a scrape of an empty store."""
    url = f"sqlite:///{tmp_path}/events.db"
    store = open_store(url)
    with serving(settings_for(url, tmp_path), store) as http:
        text = http.get("/metrics").text
    store.close()
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        base = name.removesuffix("_total")
        yield from (base + suffix for suffix in suffixes[kind])


def test_prometheus_scrapes_metrics_and_grafana_graphs_exported_series(tmp_path: Path) -> None:
    scrape = yaml.safe_load((OPS / "prometheus.yml").read_text())
    job = scrape["scrape_configs"][0]
    assert job["metrics_path"] == "/metrics"
    board = json.loads((OPS / "grafana" / "tickwork.json").read_text())
    queries = [t["expr"] for panel in board["panels"] for t in panel.get("targets", [])]
    used = {name for q in queries for name in re.findall(r"\btickwork_[a-z_]+", q)}
    exported = set(exported_series(tmp_path))
    assert used and used <= exported, used - exported
