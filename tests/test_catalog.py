"""The routing catalog: every validation rule with its path, revisions, time windows.

Pure unit tests over real files; the property tests generate valid catalogs and break them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.routing.catalog import CatalogError, load_catalog, parse_catalog, revision_of
from harness.routing.decisions import CatalogSource, NaiveTimeError, decide
from tests.catalog_support import Document, valid

EXAMPLE = Path(__file__).resolve().parent.parent / "ops" / "catalog.example.toml"
BERLIN = ZoneInfo("Europe/Berlin")


def problems(document: Document) -> list[str]:
    with pytest.raises(CatalogError) as caught:
        parse_catalog(document)
    return caught.value.problems


def _set(path: str, value: Any) -> Callable[[Document], None]:
    """A mutation that sets (or, with ..., deletes) the dotted path's value."""

    def mutate(document: Document) -> None:
        *parents, last = path.split(".")
        node: Any = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is ...:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


CAPACITIES = "targets.mini.quota_probe.required_capacities"


def _probe(capacities: list[str]) -> dict[str, Any]:
    return {"url": "http://q/v1", "remaining_path": "quotas", "required_capacities": capacities}


NIGHT = "lanes.hour.time_windows.night"
DAY = "lanes.hour.time_windows.day"

RULES = [
    (_set("colour", "blue"), "colour: unknown field"),
    (_set("targets.mini.colour", "blue"), "targets.mini.colour: unknown field"),
    (
        _set("targets.mini.api_key", "sk-123"),
        "targets.mini.api_key: secrets never go in the catalog; name the variable in api_key_env",
    ),
    (_set("schema_version", 2), "schema_version: must be 1"),
    (_set("timezone", "Mars/Olympus"), "timezone: 'Mars/Olympus' is not an IANA"),
    (_set("targets.mini.execution_class", "edge"), "targets.mini.execution_class: must be"),
    (
        _set("targets.mini.billing", "plan"),
        "targets.mini.billing: must be 'api' or 'subscription'",
    ),
    (_set("targets.mini.api_key_env", "sk-live-123"), "targets.mini.api_key_env: must match"),
    (_set("targets.mini.base_url_env", "URL"), "targets.mini: set exactly one of 'base_url'"),
    (_set("targets.local.base_url_env", ...), "targets.local: set exactly one of 'base_url'"),
    (_set(f"{NIGHT}.candidates.0", "ghost"), f"{NIGHT}.candidates[0]: unknown target 'ghost'"),
    (_set("lanes.min.candidates", ["local", "ghost"]), "lanes.min.candidates[1]: unknown target"),
    (_set(f"{DAY}.candidates", ["mini", "mini"]), f"{DAY}.candidates[1]: 'mini' is listed twice"),
    (
        _set("lanes.min.reason_codes", ["cost", "cost"]),
        "lanes.min.reason_codes[1]: 'cost' is listed twice",
    ),
    (
        _set(f"{NIGHT}.rule_id", "min-local"),
        f"{NIGHT}.rule_id: 'min-local' is used by lanes.min already",
    ),
    (
        _set(f"{DAY}.candidates", ["mini", "local"]),
        f"{DAY}.candidates[1]: 'local' is local, but 'mini' is cloud",
    ),
    (_set("lanes.min.candidates", []), "lanes.min.candidates: must not be empty"),
    (_set(f"{NIGHT}.reason_codes", []), f"{NIGHT}.reason_codes: must not be empty"),
    (_set("lanes.hour.time_windows", {}), "lanes.hour.time_windows: must declare at least one"),
    (_set("targets", {}), "targets: must name at least one target"),
    (_set("lanes", {}), "lanes: must name at least one lane"),
    (_set("lanes.min.rule_id", ...), "lanes.min.rule_id: required (or give the lane time_windows"),
    (
        _set("lanes.hour.candidates", ["local"]),
        "lanes.hour.candidates: a lane with time_windows takes its candidates from each window",
    ),
    (
        _set(f"{DAY}.end", "22:00"),
        f"{DAY}: ends at 22:00 but 'night' starts at 23:00: the windows leave a gap",
    ),
    (
        _set(f"{DAY}.end", "23:30"),
        f"{DAY}: ends at 23:30 but 'night' starts at 23:00: the windows overlap",
    ),
    (_set(f"{DAY}.end", "07:00"), f"{DAY}: start and end are both 07:00 (empty window)"),
    (_set(f"{DAY}.start", "24:00"), f"{DAY}.start: must match the pattern"),
    (_set("lanes.Hourly", {"time_windows": {}}), "lanes.Hourly: lane name must be a level name"),
    (
        _set("promotions.large", "local"),
        "promotions.large: promotions form a cycle: large -> local -> mini -> large",
    ),
    (_set("promotions.large", "large"), "promotions.large: a target cannot promote to itself"),
    (_set("promotions.ghost", "large"), "promotions.ghost: unknown target 'ghost'"),
    (_set("promotions.large", "ghost"), "promotions.large: promotes to unknown target 'ghost'"),
    (
        _set("promote_local_to_cloud", ...),
        "promotions.local: promotions are between cloud targets only ('local' is local, 'mini'",
    ),
    (
        _set("promotions.large", "local"),
        "promotions.large: promotions are between cloud targets only ('large' is cloud, 'local'",
    ),
    (
        _set("targets.large.model", "gpt-4o-mini"),
        "targets.large: same model, endpoint and effort as targets.mini (duplicate runtime",
    ),
    (
        _set("targets.local.quota_probe", {"url": "http://q/v1", "remaining_path": "left"}),
        "targets.local.quota_probe: only a cloud target has a quota to probe",
    ),
    (
        _set("targets.mini.quota_probe", {"remaining_path": "left"}),
        "targets.mini.quota_probe: set exactly one of 'url' or 'command'",
    ),
    (
        _set("targets.mini.quota_probe", {"command": [], "remaining_path": "a..b"}),
        "targets.mini.quota_probe.command: must have at least 1 item",
    ),
    (
        _set("targets.mini.quota_probe", _probe(["overall", "model:gpt-4o"])),
        f"{CAPACITIES}[1]: 'model:gpt-4o' is not a capacity of this target: 'overall' or "
        "'model:gpt-4o-mini' (its model)",
    ),
    (
        _set("targets.mini.quota_probe", _probe(["overall", "model:gpt-4o-mini", "overall"])),
        f"{CAPACITIES}[2]: 'overall' is listed twice",
    ),
    (
        _set("targets.mini.quota_probe", _probe(["overall", "requests"])),
        f"{CAPACITIES}[1]: must match the pattern",
    ),
    (
        _set("targets.mini.quota_probe", _probe([])),
        f"{CAPACITIES}: must have at least 1 item",
    ),
    (
        _set("targets.mini.selfcheck_required", "yes"),
        "targets.mini.selfcheck_required: must be a valid boolean",
    ),
    (_set("targets.mini.api", "bedrock"), "targets.mini.api: must be 'openai-chat', "),
    (
        _set("targets.mini.effort", "max"),
        "targets.mini: effort 'max' is not one openai-chat takes",
    ),
    (_set("lanes.min.policy_priority", -1), "lanes.min.policy_priority: must be greater"),
    (_set("lanes.min.policy_priority", True), "lanes.min.policy_priority: must be a valid"),
]


@pytest.mark.parametrize(("mutate", "expected"), RULES, ids=[r[1].split(":")[0] for r in RULES])
def test_every_rule_names_the_path_and_why(
    mutate: Callable[[Document], None], expected: str
) -> None:
    document = valid()
    mutate(document)
    found = problems(document)
    assert any(line.startswith(expected) for line in found), found


def test_the_example_catalog_passes_and_has_what_the_issue_asks() -> None:
    catalog = load_catalog(EXAMPLE)
    classes = sorted(target.execution_class for target in catalog.targets.values())
    assert classes == ["cloud", "cloud", "cloud", "local"]
    assert {target.api for target in catalog.targets.values()} == {"openai-chat", "anthropic"}
    assert set(catalog.lanes) == {"min", "hour"}
    assert set(catalog.lanes["hour"].time_windows or {}) == {"day", "night"}
    assert catalog.promotions


def test_the_revision_ignores_key_order_format_and_spelled_out_defaults(tmp_path: Path) -> None:
    document = valid()
    toml = load_catalog(EXAMPLE)
    reordered = json.loads(json.dumps(toml.model_dump(mode="json"), sort_keys=True))
    reversed_keys = _reverse_keys(reordered)
    as_json = tmp_path / "catalog.json"
    as_json.write_text(json.dumps(reversed_keys, indent=1))
    assert load_catalog(as_json).revision == toml.revision
    assert toml.revision == revision_of(toml.model_dump(mode="json"))

    spelled = copy.deepcopy(document)
    spelled["targets"]["local"].update(effort=None, base_url=None, prices=None)
    assert parse_catalog(spelled).revision == parse_catalog(document).revision
    document["lanes"]["hour"]["time_windows"]["day"]["candidates"] = ["large", "mini"]
    assert parse_catalog(document).revision != parse_catalog(spelled).revision


def _reverse_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _reverse_keys(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse_keys(item) for item in value]
    return value


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    yaml = tmp_path / "catalog.yaml"
    yaml.write_text("schema_version: 1")
    with pytest.raises(CatalogError, match=r"extension '\.yaml' is not \.toml or \.json"):
        load_catalog(yaml)
    broken = tmp_path / "catalog.toml"
    broken.write_text("schema_version = \n")
    with pytest.raises(
        CatalogError, match=r"catalog\.toml: invalid catalog\n  \(file\): invalid TOML"
    ):
        load_catalog(broken)
    twice = tmp_path / "catalog.json"
    twice.write_text(json.dumps(valid())[:-1] + ', "lanes": {"min": {}, "min": {}}}')
    with pytest.raises(CatalogError) as caught:
        load_catalog(twice)
    assert caught.value.problems == [
        "lanes: key appears more than once",
        "lanes.min: key appears more than once",
    ]


@pytest.mark.parametrize(
    ("local", "window"),
    [
        # Winter (CET, +01:00), summer (CEST, +02:00), and the days DST starts and ends.
        *(
            (f"{day}T{clock}", window)
            for day in ("2026-01-15", "2026-07-15", "2026-03-29", "2026-10-25")
            for clock, window in (
                ("06:59:59", "night"),
                ("07:00:00", "day"),
                ("22:59:59", "day"),
                ("23:00:00", "night"),
            )
        ),
    ],
)
def test_time_window_edges_on_the_zones_wall_clock(local: str, window: str) -> None:
    catalog = parse_catalog(valid())
    at = datetime.fromisoformat(local).replace(tzinfo=BERLIN)
    decision = decide(catalog, "hour", at.astimezone(ZoneInfo("UTC")))
    assert decision is not None
    assert decision.window == window
    assert decision.rule_id == f"hour-{window}"
    expected = ["mini", "large"] if window == "day" else ["local"]
    assert list(decision.candidates) == expected


def test_a_window_edge_inside_the_spring_forward_gap() -> None:
    document = valid()
    windows = document["lanes"]["hour"]["time_windows"]
    windows["day"]["start"] = windows["night"]["end"] = "02:30"
    catalog = parse_catalog(document)
    before = datetime.fromisoformat("2026-03-29T01:59:59+01:00")
    after = datetime.fromisoformat("2026-03-29T03:00:00+02:00")  # one second later
    assert (after - before).total_seconds() == 1
    decisions = [decide(catalog, "hour", at) for at in (before, after)]
    assert [d.window if d else None for d in decisions] == ["night", "day"]


def test_a_decision_needs_a_zone_and_a_lane() -> None:
    catalog = parse_catalog(valid())
    with pytest.raises(NaiveTimeError, match="has no time zone"):
        decide(catalog, "hour", datetime(2026, 1, 15, 7, 0))
    assert decide(catalog, "daily", datetime(2026, 1, 15, 7, 0, tzinfo=BERLIN)) is None
    decision = decide(catalog, "min", datetime(2026, 1, 15, 7, 0, tzinfo=BERLIN))
    assert decision is not None
    assert (decision.window, decision.rule_id, decision.reason_codes) == (
        None,
        "min-local",
        ("cost",),
    )
    assert decision.route_id == f"min/always@{catalog.revision[:12]}"


def test_targets_with_their_promotions_follow_each_chain_to_its_end_once() -> None:
    """`local` promotes to `mini`, `mini` to `large`: a tick on `local` may end on any."""
    catalog = parse_catalog(valid())
    assert catalog.with_promotions(["local"]) == ["local", "mini", "large"]
    assert catalog.with_promotions(["large", "mini", "large"]) == ["large", "mini"]
    assert catalog.with_promotions(catalog.lanes["hour"].targets()) == ["mini", "large", "local"]


def test_reload_keeps_the_old_catalog_when_the_new_one_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(valid()))
    reports: list[str] = []
    source = CatalogSource(path, reports.append)
    old = source.catalog.revision

    broken = valid()
    broken["lanes"]["min"]["candidates"] = ["ghost"]
    path.write_text(json.dumps(broken))
    source.poll()
    assert source.catalog.revision == old
    assert len(reports) == 1 and "lanes.min.candidates[0]: unknown target 'ghost'" in reports[0]
    assert f"revision {old[:12]} stays in force" in reports[0]
    source.poll()
    assert len(reports) == 1, "an unchanged invalid file is reported once"

    fixed = valid()
    fixed["lanes"]["min"]["candidates"] = ["local"]
    fixed["lanes"]["min"]["reason_codes"] = ["cost", "privacy"]
    path.write_text(json.dumps(fixed))
    source.poll()
    assert source.catalog.revision == parse_catalog(fixed).revision != old
    assert "reloaded" in reports[-1]
    source.request_reload()
    source.poll()
    assert len(reports) == 3 and source.catalog.revision == parse_catalog(fixed).revision


# Property tests: random valid catalogs, and random ways to break them.

NAMES = st.text(alphabet="abcdefgh", min_size=1, max_size=6)


@st.composite
def catalogs(draw: st.DrawFn) -> Document:
    target_ids = draw(st.lists(NAMES, min_size=1, max_size=5, unique=True))
    targets: Document = {}
    for index, target in enumerate(target_ids):
        targets[target] = {
            "model": draw(st.sampled_from(["gpt-4o", "qwen", "llama-3"])),
            "execution_class": draw(st.sampled_from(["local", "cloud"])),
            **(
                {"base_url": f"http://host{index}.lan/v1"}
                if draw(st.booleans())
                else {"base_url_env": f"URL_{index}"}
            ),
        }
        if draw(st.booleans()):
            targets[target]["effort"] = draw(st.sampled_from(["low", "medium", "high"]))
    by_class: dict[str, list[str]] = {}
    for target in target_ids:
        by_class.setdefault(targets[target]["execution_class"], []).append(target)

    def rule(rule_id: str) -> Document:
        pool = by_class[draw(st.sampled_from(sorted(by_class)))]
        chosen = draw(st.lists(st.sampled_from(pool), min_size=1, unique=True))
        codes = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
        return {"rule_id": rule_id, "reason_codes": codes, "candidates": chosen}

    lanes: Document = {}
    for level in draw(
        st.lists(st.sampled_from(["min", "hour", "day", "night_shift"]), min_size=1, unique=True)
    ):
        cuts = draw(st.lists(st.integers(0, 24 * 60 - 1), max_size=4, unique=True).map(sorted))
        if not cuts:
            lanes[level] = {**rule(f"{level}-rule"), "policy_priority": draw(st.integers(0, 9))}
            continue
        clocks = [f"{m // 60:02d}:{m % 60:02d}" for m in cuts]
        lanes[level] = {
            "time_windows": {
                f"w{i}": {
                    "start": start,
                    "end": clocks[(i + 1) % len(clocks)],
                    **rule(f"{level}-w{i}"),
                }
                for i, start in enumerate(clocks)
            }
        }
    local_to_cloud = draw(st.booleans())
    promotions = {
        weaker: stronger
        for weaker, stronger in pairwise(target_ids)
        if targets[stronger]["execution_class"] == "cloud"
        and (local_to_cloud or targets[weaker]["execution_class"] == "cloud")
        and draw(st.booleans())
    }
    return {
        "schema_version": 1,
        "promote_local_to_cloud": local_to_cloud,
        "timezone": draw(st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"])),
        "targets": targets,
        "lanes": lanes,
        "promotions": promotions,
    }


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=catalogs(), seed=st.randoms())
def test_valid_catalogs_round_trip_and_keep_their_revision(
    tmp_path: Path, document: Document, seed: Any
) -> None:
    catalog = parse_catalog(document)
    dumped = catalog.model_dump(mode="json")
    shuffled = _shuffle_keys(dumped, seed)
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(shuffled))
    again = load_catalog(path)
    assert again == catalog
    assert again.revision == catalog.revision == revision_of(dumped)


def _shuffle_keys(value: Any, seed: Any) -> Any:
    if isinstance(value, dict):
        keys = list(value)
        seed.shuffle(keys)
        return {key: _shuffle_keys(value[key], seed) for key in keys}
    if isinstance(value, list):
        return [_shuffle_keys(item, seed) for item in value]
    return value


def _first_rule(document: Document) -> tuple[str, Document]:
    level, lane = next(iter(document["lanes"].items()))
    if "time_windows" in lane:
        name, window = next(iter(lane["time_windows"].items()))
        return f"lanes.{level}.time_windows.{name}", window
    return f"lanes.{level}", lane


def _break(document: Document, how: str) -> str:
    """Break a valid catalog one way; returns the path the error must name."""
    where, rule = _first_rule(document)
    first_target = next(iter(document["targets"]))
    if how == "unknown field":
        rule["weight"] = 3
        return f"{where}.weight"
    if how == "unknown target":
        rule["candidates"].append("zzz-unknown")
        return f"{where}.candidates[{len(rule['candidates']) - 1}]"
    if how == "duplicate":
        rule["candidates"].append(rule["candidates"][0])
        return f"{where}.candidates[{len(rule['candidates']) - 1}]"
    if how == "empty":
        rule["reason_codes"] = []
        return f"{where}.reason_codes"
    if how == "self promotion":
        document["promotions"][first_target] = first_target
        return f"promotions.{first_target}"
    assert how == "secret"
    document["targets"][first_target]["api_key"] = "sk-live"
    return f"targets.{first_target}.api_key"


@settings(max_examples=60, deadline=None)
@given(
    document=catalogs(),
    how=st.sampled_from(
        ["unknown field", "unknown target", "duplicate", "empty", "self promotion", "secret"]
    ),
)
def test_random_mutations_are_rejected_with_their_path(document: Document, how: str) -> None:
    path = _break(document, how)
    found = problems(document)
    assert any(line.startswith(f"{path}: ") for line in found), (path, found)
