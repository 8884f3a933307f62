"""Configuration: defaults, file, environment overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import ConfigError, load_settings
from harness.config.store_url import parse_store_url
from harness.devtools.example_config import example_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tickwork.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TICKWORK_CONFIG", raising=False)
    settings = load_settings()
    assert settings.store.url == "sqlite:///./.tickwork/events.db"
    assert settings.paths.results == Path(".tickwork/results")
    assert settings.levels == {}
    assert settings.retention.hot_days == 30
    assert settings.retention.archive == Path(".tickwork/archive")


def test_the_example_file_is_valid(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, example_config()))
    assert set(settings.levels) == {"min", "hour"}
    assert settings.levels["hour"].max_tool_calls == 300


def test_environment_wins_over_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = write(tmp_path, '[store]\nurl = "sqlite:///file.db"\ndurability = "power"\n')
    monkeypatch.setenv("TICKWORK_CONFIG", str(path))
    monkeypatch.setenv("TICKWORK_STORE_URL", "postgresql://db/tickwork")
    monkeypatch.setenv("TICKWORK_MAX_TOOL_CALLS", "5")  # a worker's variable, not config
    settings = load_settings()
    assert settings.store.url == "postgresql://db/tickwork"
    assert settings.store.durability == "power"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[levels.min]\nschedul = "* * * * *"\n',
            "unknown key 'schedul' in [levels.min]; did you mean 'schedule'?",
        ),
        ('[levels.min]\nschedule = "* * *"\n', "levels.min.schedule: '* * *'"),
        ('[digests.d]\nschedule = "* * * * *"\nevery = "5m"\n', "exactly one of"),
        ('[levels.min]\nevery = "soon"\n', "not an interval"),
        ('[levels.min]\nevery = "1m"\nprompt = "a"\nprompt_file = "p.md"\n', "not both"),
        ('[levels.min]\nevery = "1m"\ntimezone = "Mars/Olympus"\n', "not an IANA time zone"),
        ('[levels.min]\nevery = "1m"\noverlap = "queue"\n', "levels.min.overlap"),
        ('[levels.min]\nevery = "1m"\napi = "bedrock"\n', "levels.min.api: must be"),
        (
            '[levels.min]\nevery = "1m"\nbilling = "plan"\n',
            "levels.min.billing: must be 'api' or 'subscription'",
        ),
        (
            '[levels.min]\nevery = "1m"\napi = "ollama"\neffort = "max"\n',
            "levels.min: effort 'max' is not one ollama takes",
        ),
        ('[levels.Bad-Name]\nevery = "5m"\n', "level name 'Bad-Name'"),
        ("[store]\nurl = 5\n", "store.url: must be a valid string"),
        ("[prices.m]\ninput_per_mtok = -1\noutput_per_mtok = 1\n", "prices.m.input_per_mtok"),
        (
            "[prices.m]\ninput_per_mtok = 1\noutput_per_mtok = 1\nper_request_usd = -1\n",
            "prices.m.per_request_usd",
        ),
        (
            "[prices.m]\ninput_per_mtok = 1\noutput_per_mtok = 1\ncache_write_1h_per_mtok = -6\n",
            "prices.m.cache_write_1h_per_mtok",
        ),
        ("[nonsense]\n", "unknown key 'nonsense' at the top level"),
        ("[store\nurl=", "invalid TOML"),
        ("[retention]\nhot_days = 0\n", "retention.hot_days: must be greater than"),
        ("[retention]\nhot_days = 7\ntranscript_days = 8\n", "transcript_days (8) exceeds"),
        ('[retention]\nhot_days = "month"\n', "retention.hot_days: must be a valid"),
        ('[scheduling]\ndst_repeated = "twice"\n', "scheduling.dst_repeated: must be"),
        ('[scheduling]\ndst_skipped = "never"\n', "scheduling.dst_skipped: must be"),
        ('[digests.d]\nevery = "1h"\ndst_skipped = 1\n', "digests.d.dst_skipped: must be"),
    ],
)
def test_a_bad_file_names_the_key_and_why(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(path) in str(caught.value)
    assert expected in str(caught.value)


STORE_URLS = (
    "sqlite:///./.tickwork/events.db",
    "sqlite://",
    "sqlite:////abs/events.db?timeout=5",
    "postgresql://db/tickwork",
    "postgresql+psycopg://tick:p%40ss%3Aw%2Ford@db.example:5433/tw?sslmode=require&a=1&a=2",
    "postgresql://tick:@[::1]:5432/tw",
    "postgresql://:secret@/tw?host=/run/postgresql",
    "mysql+pymysql://u:p@h/d",
    "postgresql://db:5x32/tw",
    "postgresql://db: 7/tw",
    "postgresql://db:/tw",
    "my-sql://h/d",
    "events.db",
    "",
    "postgresql:/db",
    "postgresql://h/d\nwith a line after",
)


@pytest.mark.parametrize("url", STORE_URLS)
def test_the_store_url_is_read_as_sqlalchemy_reads_it(url: str) -> None:
    """The configuration's own parse, not SQLAlchemy's: same backend, password and refusals."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        made = make_url(url)
    except (ArgumentError, ValueError):
        with pytest.raises(ValueError):
            parse_store_url(url)
        return
    parsed = parse_store_url(url)
    assert (parsed.backend, parsed.password) == (made.get_backend_name(), made.password)


def test_a_store_url_sqlalchemy_cannot_read_or_of_another_backend_is_refused_by_key(
    tmp_path: Path,
) -> None:
    for url, expected in (
        ("events.db", "store.url: is not a database URL"),
        ("postgresql://db:5x32/tw", "store.url: is not a database URL"),
        ("mysql+pymysql://u:p@h/d", "store.url: backend 'mysql' is not supported"),
    ):
        with pytest.raises(ConfigError, match=expected):
            load_settings(write(tmp_path, f'[store]\nurl = "{url}"\n'))


def test_errors_are_in_tickworks_words_with_the_key_meant(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[levels.min]\nevery = "1m"\ntimeout_secods = 5\nschedule = "* * *"\n'
        '[[budgets]]\nname = "b"\nscope = "global"\n[store]\nbogus = 1\n',
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert (
        "  unknown key 'timeout_secods' in [levels.min]; did you mean 'timeout_seconds'?\n"
        in message
    )
    assert "  unknown key 'bogus' in [store]\n" in message, "no hint when nothing is close"
    assert "budgets.0: a budget needs a limit" in message
    for phrase in ("Extra inputs are not permitted", "Value error,", "Input should be"):
        assert phrase not in message, message


def test_a_named_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "absent.toml")
