"""Careless and hostile input gets a clear error: no traceback, no 500, no stored change.

Each case the issue found has its own test; the property behind it is a generated test,
so that the next input of the same kind is caught too (DESIGN invariant 9).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from harness.config import ConfigError, Settings, load_settings
from harness.contracts.events import TickFailed
from harness.contracts.payload import TickPayload
from harness.contracts.result import MAX_RESULT_BYTES, ResultFileError, read_result
from harness.execution.launchers.cold import ColdLauncher
from harness.execution.prepare import Preparer, TickRef, TickSetupError
from harness.execution.runner import Ended, Runner
from harness.routing.catalog import CatalogError, load_catalog, parse_catalog
from harness.routing.decisions import configured_router
from harness.scheduling.triggers import level_trigger, next_slot
from harness.store import open_store
from tests.api_support import serving, settings_for
from tests.catalog_support import valid as valid_catalog
from tests.commands import forked, forked_each
from tests.tick_support import NAMED_UPSTREAM, make_settings

LEVEL = '[levels.min]\nmodel = "m"\n'

BAD_SCHEDULES = {
    "61 * * * *": "higher than the maximum",
    "*/0 * * * *": "Increment must be higher than 0",
    "5-1 * * * *": "must not be higher",
    "0 0 ? * *": "Unrecognized expression",
    "a b c d e": "not a valid cron expression",
    "0 0 31 2 *": "never fires",
}


def write(folder: Path, text: str | bytes, name: str = "tickwork.toml") -> Path:
    path = folder / name
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    return path


def config_error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    return str(caught.value)


@pytest.mark.parametrize(("schedule", "why"), BAD_SCHEDULES.items())
def test_a_bad_cron_schedule_is_refused_at_load(tmp_path: Path, schedule: str, why: str) -> None:
    message = config_error(write(tmp_path, LEVEL + f'schedule = "{schedule}"\n'))
    assert "levels.min.schedule" in message and why in message


@pytest.mark.parametrize("every", ["9999999999999d", "367d", "0s", "1w"])
def test_an_impossible_interval_is_refused_at_load(tmp_path: Path, every: str) -> None:
    message = config_error(write(tmp_path, LEVEL + f'every = "{every}"\n'))
    assert "levels.min.every" in message and repr(every) in message


@pytest.mark.parametrize("url", ["x", "", "mysql://h/db", "http://h/x", "sqlite:///a\\u0000b"])
def test_a_bad_store_url_is_refused_at_load(tmp_path: Path, url: str) -> None:
    assert "store.url" in config_error(write(tmp_path, f'[store]\nurl = "{url}"\n'))


def test_a_level_without_a_model_or_catalog_is_refused_at_load(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, '[levels.min]\nevery = "1m"\n'))
    assert "levels.min.model" in message


def test_a_level_without_a_model_or_lane_is_refused_at_load(tmp_path: Path) -> None:
    """Every command refuses it, and a catalog reload that drops its lane is rejected."""
    catalog = write(tmp_path, json.dumps(valid_catalog()), "catalog.json")
    write(
        tmp_path,
        f'[store]\nurl = "sqlite:///{tmp_path}/events.db"\n[routing]\ncatalog = "{catalog}"\n'
        '[levels.min]\nevery = "1m"\n[levels.day]\nevery = "1d"\n',
    )
    for command in (["status"], ["events"], ["tick", "min"]):
        result = forked(tmp_path, *command)
        assert result.returncode == 2, (command, result.stderr)
        assert "levels.day: has no model and the catalog has no lane" in result.stderr
        assert "levels.min" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "events.db").exists(), "a refused configuration creates nothing"

    settings = load_settings(tmp_path / "tickwork.toml")
    routed_only = settings.model_copy(update={"levels": {"min": settings.levels["min"]}})
    reports: list[str] = []
    router = configured_router(routed_only, reports.append)
    assert router is not None
    document = valid_catalog()
    del document["lanes"]["min"]
    catalog.write_text(json.dumps(document))
    router.source.poll()
    assert "levels.min: has no model" in reports[-1] and "min" in router.source.catalog.lanes


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b'[levels.min]\nevery = "1m"\nprompt = "\xff\xfe"\n', "not UTF-8"),
        (("a = " + "[" * 5000 + "]" * 5000 + "\n").encode(), "nested too deeply"),
    ],
    ids=["not utf-8", "nested"],
)
def test_an_unreadable_file_is_named_with_the_reason(
    tmp_path: Path, content: bytes, why: str
) -> None:
    path = write(tmp_path, content)
    assert str(path) in config_error(path) and why in config_error(path)
    catalog = write(tmp_path, content.replace(b"a = ", b'{"a": ').rstrip() + b"}", "c.json")
    with pytest.raises(CatalogError) as caught:
        load_catalog(catalog)
    assert why in str(caught.value) or "invalid JSON" in str(caught.value)


@pytest.mark.parametrize("table", ["a", "levels.min.a"], ids=["top level", "in a level"])
def test_a_table_header_thousands_of_levels_deep_exits_2_naming_the_file(
    tmp_path: Path, table: str
) -> None:
    """TOML reads such a header without recursing; every walk over the document did not."""
    header = f"[{table}." + ".".join(["b"] * 3000) + "]\nx = 1\n"
    path = write(tmp_path, LEVEL + 'every = "1m"\n' + header)
    result = forked(tmp_path, "status")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{path.name}: invalid configuration" in result.stderr
    assert f"{table}.b" in result.stderr and "nested more than 64" in result.stderr
    assert not (tmp_path / ".tickwork").exists(), "a refused configuration creates nothing"


@pytest.mark.parametrize(
    ("config", "env", "named"),
    [
        (LEVEL + 'schedule = "61 * * * *"\n', {}, "levels.min.schedule"),
        (LEVEL + 'every = "9999999999999d"\n', {}, "levels.min.every"),
        ('[store]\nurl = "mysql://h/db"\n', {}, "store.url"),
        ("", {"TICKWORK_STORE_URL": "x"}, "store.url"),
        ('[levels."[/x]"]\nevery = "1m"\nmodel = "m"\n', {}, "'[/x]' must match ^[a-z]"),
    ],
    ids=["cron", "every", "store url", "store url from env", "markup in a name"],
)
def test_every_command_exits_2_naming_the_key_without_a_traceback(
    tmp_path: Path, config: str, env: dict[str, str], named: str
) -> None:
    write(tmp_path, config)
    for command in (["status"], ["events"], ["spend"]):
        result = forked(tmp_path, *command, env=env)
        assert result.returncode == 2, (command, result.stderr)
        assert named in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / ".tickwork").exists(), "a refused configuration creates nothing"


def test_a_prompt_file_that_is_not_utf8_fails_the_tick_setup_naming_it(tmp_path: Path) -> None:
    prompt = write(tmp_path, b"\xff\xfe check", "prompt.txt")
    settings = make_settings(tmp_path, prompt="", prompt_file=prompt)
    with pytest.raises(TickSetupError) as caught:
        Preparer(settings, None, env=NAMED_UPSTREAM).prepare("min")
    assert "levels.min.prompt_file" in str(caught.value) and "not UTF-8" in str(caught.value)


def test_a_nul_byte_in_the_config_or_catalog_is_refused_at_load(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, '[levels.min]\nevery = "1m"\nmodel = "a\\u0000b"\n'))
    assert "levels.min.model: holds a NUL byte" in message
    document = valid_catalog()
    document["targets"]["mini"]["model"] = "gpt\0mini"
    with pytest.raises(CatalogError) as caught:
        load_catalog(write(tmp_path, json.dumps(document), "catalog.json"))
    assert "targets.mini.model: holds a NUL byte" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "why"),
    [('{"a": ', "TICKWORK_PRICES: not valid JSON"), ("[" * 5000 + "]" * 5000, "nested too deeply")],
    ids=["broken", "nested"],
)
def test_a_section_variable_that_is_not_json_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, why: str
) -> None:
    monkeypatch.setenv("TICKWORK_PRICES", value)
    assert why in config_error(write(tmp_path, LEVEL + 'every = "1m"\n'))


def test_a_result_file_swapped_by_its_tick_is_refused_without_reading_it(tmp_path: Path) -> None:
    """A huge file, a FIFO or a link to /dev/zero would fill the runner's memory or hang it."""
    link, fifo, huge = tmp_path / "link.json", tmp_path / "fifo.json", tmp_path / "huge.json"
    link.symlink_to("/dev/zero")
    os.mkfifo(fifo)
    with open(huge, "wb") as file:
        file.truncate(MAX_RESULT_BYTES + 1)  # sparse: no disk is used
    for path, why in ((huge, "larger"), (fifo, "not a regular file"), (link, "cannot be read")):
        with pytest.raises(ResultFileError) as caught:
            read_result(path)
        assert why in str(caught.value), path


def test_a_tick_log_swapped_for_a_fifo_does_not_hang_the_runner(tmp_path: Path) -> None:
    log = tmp_path / "tick.log"
    os.mkfifo(log)
    runner = Runner(make_settings(tmp_path), None, ColdLauncher())
    ref = TickRef("min-x", "min", tmp_path / "none.json", log, 10)
    ended: list[Ended] = []
    reader = threading.Thread(target=lambda: ended.append(runner.terminal(ref, 1, False)))
    reader.daemon = True
    reader.start()
    reader.join(30)
    assert ended, "reading the log's tail blocked on the FIFO"
    assert isinstance(ended[0].event, TickFailed) and ended[0].event.stderr_tail == ""


def test_a_catalog_base_url_with_credentials_is_refused() -> None:
    document = valid_catalog()
    document["targets"]["mini"]["base_url"] = "https://user:s3cret-pass@api.example.com/v1"
    with pytest.raises(CatalogError) as caught:
        parse_catalog(document)
    assert "targets.mini.base_url" in str(caught.value) and "api_key_env" in str(caught.value)
    assert "s3cret-pass" not in str(caught.value)


def test_an_error_naming_a_section_prints_its_brackets(tmp_path: Path) -> None:
    write(tmp_path, f'[store]\nurl = "sqlite:///{tmp_path}/events.db"\n')
    result = forked(tmp_path, "rag", "index")
    assert result.returncode == 2 and "[rag] folder is not set" in result.stderr


def test_a_catalog_price_must_be_finite(tmp_path: Path) -> None:
    document = valid_catalog()
    document["targets"]["mini"]["prices"] = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    text = json.dumps(document).replace("2.0", "Infinity")
    with pytest.raises(CatalogError) as caught:
        load_catalog(write(tmp_path, text, "catalog.json"))
    assert "Infinity" in str(caught.value)
    document["targets"]["mini"]["prices"]["output_per_mtok"] = math.inf
    with pytest.raises(CatalogError) as caught:
        parse_catalog(document)
    assert "targets.mini.prices.output_per_mtok" in str(caught.value)


def test_a_command_without_a_configuration_says_so_and_creates_nothing(tmp_path: Path) -> None:
    """Each command that works on levels, digests or a catalog, which only a file names."""
    commands = [["status"], ["run"], ["digest"], ["tick", "min"], ["pause", "min"]]
    for command, result in zip(commands, forked_each(tmp_path, commands), strict=True):
        assert result.returncode == 2, (command, result.stderr)
        assert "no configuration here" in result.stderr and "tickwork init" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_prints_section_names_with_their_brackets(tmp_path: Path) -> None:
    result = forked(tmp_path, "rag", "index", "--help")
    assert result.returncode == 0 and "Default: [rag] folder." in result.stdout


def test_an_unknown_event_type_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    write(tmp_path, f'[store]\nurl = "sqlite:///{tmp_path}/events.db"\n')
    result = forked(tmp_path, "events", "--type", "BudgetSpnt")
    assert result.returncode == 2
    assert "BudgetSpnt" in result.stderr and "BudgetSpent" in result.stderr


@pytest.mark.parametrize("since", ["1000000d", "99999999999999999999d"])
def test_a_since_beyond_the_calendar_is_a_clear_error(
    tmp_path: Path, sqlite_url: str, since: str
) -> None:
    store = open_store(sqlite_url)
    try:
        with serving(settings_for(sqlite_url, tmp_path), store) as http:
            for path in ("/ticks", "/spend"):
                answer = http.get(path, params={"since": since})
                assert answer.status_code == 422, answer.text
                assert answer.json()["detail"][0]["loc"] == ["query", "since"]
    finally:
        store.close()
    write(tmp_path, f'[store]\nurl = "{sqlite_url}"\n')
    result = forked(tmp_path, "spend", "--since", since)
    assert result.returncode == 2 and "before the year 1" in result.stderr
    assert "Traceback" not in result.stderr


# Generated input ------------------------------------------------------------------------

SECTIONS = {
    "store": ["url", "durability"],
    "paths": ["results", "spool", "digests"],
    "runner": ["grace_seconds", "max_concurrent", "infra_retries", "retry_backoff_seconds"],
    "rag": ["folder", "k", "timeout_seconds"],
    "routing": ["catalog", "availability_ttl_seconds"],
    "api": ["host", "port", "refresh_seconds"],
    "levels.min": ["schedule", "every", "timezone", "model", "prompt", "timeout_seconds"],
    "digests.daily": ["every", "period", "levels", "format", "notify", "files"],
}

scalars = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["* * * * *", "1m", "0 0 31 2 *", "61 * * * *", "UTC", "Mars/Base"]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
values = st.one_of(scalars, st.lists(scalars, max_size=3))


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


@st.composite
def config_files(draw: st.DrawFn) -> str:
    lines = []
    for section in draw(st.lists(st.sampled_from(sorted(SECTIONS)), unique=True)):
        lines.append(f"[{section}]")
        for key in draw(st.lists(st.sampled_from(SECTIONS[section]), unique=True)):
            lines.append(f"{key} = {toml_value(draw(values))}")
    return "\n".join(lines) + "\n"


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=config_files())
def test_any_configuration_loads_or_is_refused_with_config_error(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    try:
        loaded = load_settings(path)
    except ConfigError:
        return
    for schedule in [*loaded.levels.values(), *loaded.digests.values()]:
        next_slot(level_trigger(schedule), None, datetime.now(UTC))


json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@st.composite
def mangled_catalogs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid catalog with a few values replaced, anywhere in it, by arbitrary JSON."""
    document = valid_catalog()
    for _ in range(draw(st.integers(1, 3))):
        node: Any = document
        while isinstance(node, dict) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node)))
            if not isinstance(node[key], dict) or draw(st.booleans()):
                node[key] = draw(json_values)
                break
            node = node[key]
    return document


@settings(max_examples=200, deadline=None)
@given(document=mangled_catalogs())
def test_any_catalog_parses_or_is_refused_with_catalog_error(document: dict[str, Any]) -> None:
    try:
        parse_catalog(document)
    except CatalogError as exc:
        assert exc.problems


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200) | json_values.map(lambda value: json.dumps(value).encode()))
def test_any_payload_validates_or_is_refused_with_validation_error(raw: bytes) -> None:
    with contextlib.suppress(ValidationError):
        TickPayload.model_validate_json(raw)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(max_size=200) | json_values.map(lambda value: json.dumps(value).encode()))
def test_any_result_file_reads_or_is_refused_with_result_file_error(
    tmp_path: Path, raw: bytes
) -> None:
    path = write(tmp_path, raw, "result.json")
    try:
        read_result(path)
    except ResultFileError as exc:
        assert str(path) in str(exc)


def test_settings_built_in_code_hold_the_same_rules() -> None:
    with pytest.raises(ValidationError):
        Settings(levels={"min": {"every": "1m"}})  # type: ignore[dict-item]
