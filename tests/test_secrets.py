"""No secret value leaves the process that holds it (DESIGN invariant 11).

An upstream that quotes the API key in its error is the hostile case: the key must reach
no event, result file, tick log, digest, API answer or terminal line. A tick's environment
holds its own targets' keys and no other secret, and what tickwork writes is its user's
alone (files 0600, folders 0700).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from harness.config import StoreConfig, load_settings
from harness.contracts.events import TickFailed
from harness.contracts.secrets import (
    ALERT_URLS_ENV,
    API_KEY_ENV,
    API_TOKEN_ENV,
    MIN_SECRET_CHARS,
    redact,
    redact_data,
    register_secret_names,
    withhold_environment,
)
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.store import SqlEventStore, open_store
from tests.api_support import TOKEN as API_TOKEN
from tests.api_support import serving, settings_for
from tests.commands import (
    TICKWORK,
    Output,
    environment,
    fake_server,
    forked,
    forked_each,
    free_port,
    write_config,
)
from tests.tick_support import SECRET, Harness

TOKEN = "tw-api-token-SECRET-5e1f0c9a"
ALERT_URL = "json://127.0.0.1:9/alert-SECRET-7c2d"
DIGEST_URL = "json://127.0.0.1:9/digest-SECRET-0b4e"

LEVEL = """
[levels.min]
every = "1m"
model = "fake-model"
prompt = "Check the pager."
rag = false
[digests.daily]
every = "1d"
notify = ["TICKWORK_TEST_DIGEST_URL"]
"""

QUOTING = {
    "401 quoting the key": Step(status=401, error_message="Incorrect API key provided: {key}."),
    "500 quoting the header": Step(
        status=500, error_message="upstream failed; request had Authorization: {authorization}"
    ),
}


def files_under(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


@pytest.mark.parametrize("answer", QUOTING.values(), ids=QUOTING.keys())
def test_an_upstream_quoting_the_key_leaks_it_nowhere(tmp_path: Path, answer: Step) -> None:
    config = write_config(tmp_path, LEVEL, runner="infra_retries = 0")
    env = {
        "TICKWORK_CONFIG": str(config),
        "OPENAI_API_KEY": SECRET,
        API_TOKEN_ENV: TOKEN,
        "TICKWORK_TEST_DIGEST_URL": DIGEST_URL,
    }
    with fake_server([answer]) as fake:
        ticked = forked(tmp_path, "tick", "min", env={**env, "OPENAI_BASE_URL": fake.url})
    assert ticked.returncode == 1, ticked.stderr
    terminal = ticked.stdout + ticked.stderr
    assert SECRET not in terminal and "Traceback" not in terminal
    assert "[redacted:OPENAI_API_KEY]" in terminal, "the error is shown, the key is not"

    digest = forked(tmp_path, "digest", "--since", "1h", "--format", "json", env=env)
    assert digest.returncode == 0, digest.stderr
    assert SECRET not in digest.stdout and "[redacted:OPENAI_API_KEY]" in digest.stdout

    for path in files_under(tmp_path):
        assert SECRET.encode() not in path.read_bytes(), f"the API key leaked into {path}"

    settings = load_settings(config)
    store = open_store(settings.store.url)
    try:
        events = store.read_all(0, 1000)
        assert SECRET not in str([event.data for event in events])
        [failed] = [e for e in events if e.type == TickFailed.type]
        with serving(settings, store) as http:
            answer_text = http.get(f"/ticks/{failed.data['tick_id']}").text
    finally:
        store.close()
    assert SECRET not in answer_text and "[redacted:OPENAI_API_KEY]" in answer_text


def test_a_refused_key_pauses_the_level_at_once_naming_the_variable(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    outcome = harness.tick([Step(status=401, error_message="Incorrect API key provided: {key}")])
    events = harness.events(outcome)
    failed = [e for e in events if e.type == "TickFailed"]
    assert [e.data["failure_class"] for e in failed] == ["configuration"]
    assert not [e for e in events if e.type == "TickAttemptFailed"], "no retry mends a bad key"
    [paused] = harness.store.read_stream("level-min")
    assert paused.type == "LevelPaused" and "OPENAI_API_KEY" in paused.data["reason"]


def test_a_shell_tick_cannot_read_the_services_secrets(tmp_path: Path, fake: FakeUpstream) -> None:
    harness = Harness(tmp_path, fake, rag=False, can_shell=True)
    harness.runner.env.update(
        {
            API_TOKEN_ENV: TOKEN,
            ALERT_URLS_ENV: ALERT_URL,
            "TICKWORK_TEST_DIGEST_URL": DIGEST_URL,
        }
    )
    register_secret_names(["TICKWORK_TEST_DIGEST_URL"])
    read_env = Step(tool_calls=[ToolCallSpec(name="shell", arguments={"command": "env"})])
    outcome = harness.tick([read_env, Step(text="done")])
    assert outcome.status == "completed", outcome.reason
    told = str(fake.state.received[-1]["messages"])
    assert "OPENAI_BASE_URL" in told, "the shell's output reached the model"
    for secret in (TOKEN, ALERT_URL, DIGEST_URL):
        assert secret not in told


def test_the_store_password_reaches_the_worker_through_its_environment_only(
    tmp_path: Path, fake: FakeUpstream, pg_store: SqlEventStore, pg_session_url: str
) -> None:
    password = "pg-pass-0123456789"
    url = make_url(pg_session_url).set(password=password).render_as_string(hide_password=False)
    harness = Harness(tmp_path, fake, rag=False, can_shell=True)
    settings = harness.settings.model_copy(update={"store": StoreConfig(url=url)})
    harness.preparer.settings = harness.runner.settings = settings
    harness.preparer.store = harness.runner.store = harness.store = pg_store
    prepared = harness.preparer.prepare("min")
    assert password not in prepared.payload.model_dump_json()
    read_env = Step(tool_calls=[ToolCallSpec(name="shell", arguments={"command": "env"})])
    fake.script(prepared.payload.tick_id, [read_env, Step(text="done")])
    outcome = harness.runner.run(prepared)
    assert outcome.status == "completed", outcome.reason
    assert f"PGPASSWORD={password}" in str(fake.state.received[-1]["messages"])
    events = pg_store.read_stream(f"tick-{outcome.tick_id}")
    assert "BudgetSpent" in [e.type for e in events], "the worker reached the store"
    assert password not in str([(e.data, e.metadata) for e in events])
    for path in files_under(tmp_path):
        assert password.encode() not in path.read_bytes(), path


def test_the_services_output_redacts_the_password_inside_the_store_url(
    tmp_path: Path, pg_store: SqlEventStore, pg_session_url: str
) -> None:
    """The password stands in the file, not the environment: it is a secret all the same."""
    password = "pg-pass-SECRET-8f2e61"
    url = make_url(pg_session_url).set(password=password).render_as_string(hide_password=False)
    env = {"TICKWORK_CONFIG": str(write_config(tmp_path, LEVEL, store_url=url))}
    said = f"rotating the store's password {password} tonight"
    paused = forked(tmp_path, "pause", "min", "--reason", said, env=env)
    assert paused.returncode == 0, paused.stderr
    events, status = forked_each(tmp_path, [["events", "--json"], ["status", "--json"]], env=env)
    for shown in (paused, events, status):
        assert shown.returncode == 0, shown.stderr
        assert password not in shown.stdout + shown.stderr
    assert "rotating the store's password [redacted:PGPASSWORD] tonight" in events.stdout
    assert "postgresql+psycopg://postgres:***@" in status.stdout
    assert password not in str([event.data for event in pg_store.read_all(0, 100)])


READ_ENVIRON = """
import sys
try:
    print(open(f"/proc/{sys.argv[1]}/environ", "rb").read().decode(errors="replace"))
except PermissionError:
    print("refused")
"""


AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
AS_NOBODY += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--"]
"""Root reads any process's environment: under root both sides run as `nobody`, allowed
to read files (the venv may live under /root) but not to trace."""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/environ is Linux")
def test_another_process_of_the_services_user_cannot_read_its_environment() -> None:
    """What a `can_shell` tick would try: read the service's secrets from /proc."""
    prefix = AS_NOBODY if os.geteuid() == 0 else []
    port = free_port()
    service = subprocess.Popen(
        [*prefix, TICKWORK, "fake-llm", "--port", str(port)],
        env=environment(**{API_TOKEN_ENV: TOKEN}),
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = Output(service)
    try:
        output.wait_for("fake upstream on")
        read = subprocess.run(
            [*prefix, sys.executable, "-c", READ_ENVIRON, str(service.pid)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        output.stop()
    assert read.stdout.strip() == "refused", "the service's environment was readable"


def test_what_tickwork_writes_is_its_users_alone(tmp_path: Path, fake: FakeUpstream) -> None:
    open_store(f"sqlite:///{tmp_path}/events.db").close()  # created by tickwork, not copied
    harness = Harness(tmp_path, fake, rag=False)
    outcome = harness.tick([Step(text="done")])
    failed = TickFailed(tick_id="x", level="min", reason="store down")
    harness.runner.spool.write("tick-x", [failed.to_record()])
    assert not outcome.log_path.exists()  # a healthy tick's empty log is removed
    created = [tmp_path / "events.db", outcome.result_path]
    created += files_under(tmp_path / "spool")
    assert (tmp_path / "events.db-wal").exists()
    created.append(tmp_path / "events.db-wal")
    for path in created:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for folder in {path.parent for path in created} - {tmp_path}:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_tick_warns_of_a_base_url_without_a_key(tmp_path: Path) -> None:
    config = write_config(tmp_path, LEVEL)
    with fake_server([Step(text="done")]) as fake:
        ticked = forked(
            tmp_path,
            "tick",
            "min",
            env={"TICKWORK_CONFIG": str(config), "OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": ""},
        )
    assert ticked.returncode == 0, ticked.stderr
    assert "OPENAI_API_KEY is not" in ticked.stderr


secret_text = st.text(
    st.characters(whitelist_categories=("L", "N", "P", "S"), blacklist_characters=","),
    min_size=MIN_SECRET_CHARS,
    max_size=40,
)
"""Keys and tokens: no spaces or commas (those separate the URLs of a list)."""


@given(secret=secret_text, before=st.text(max_size=30), after=st.text(max_size=30))
def test_a_secret_is_redacted_wherever_it_stands(secret: str, before: str, after: str) -> None:
    env = {"OPENAI_API_KEY": secret}
    text = redact(before + secret + after, env)
    assert secret not in text.replace("[redacted:OPENAI_API_KEY]", "\0")
    nested = redact_data({"a": [before + secret, {"b": secret + after}], "n": 1}, env)
    assert secret not in str(nested["a"]).replace("[redacted:OPENAI_API_KEY]", "\0")
    assert nested["n"] == 1


short_secret = st.text(
    st.characters(whitelist_categories=("L", "N"), max_codepoint=127),
    min_size=1,
    max_size=MIN_SECRET_CHARS - 1,
)


@given(secret=short_secret, name=st.from_regex(r"[a-z]{1,8}", fullmatch=True))
def test_a_short_secret_is_redacted_as_a_word_in_free_text_only(secret: str, name: str) -> None:
    """Quoted by an upstream it is replaced; inside an identifier it is left alone."""
    env = {"OPENAI_API_KEY": secret}
    quoted = f"Incorrect API key provided: {secret}. Bearer {secret}"
    marker = "[redacted:OPENAI_API_KEY]"
    assert redact(quoted, env, words=True).count(marker) == 2
    event = {"reason": quoted, "level": secret, "tick_id": f"{secret}-20261130", "ok": True}
    redacted = redact_data(event, env)
    assert redacted["reason"].count(marker) == 2
    assert {k: v for k, v in redacted.items() if k != "reason"} == {
        k: v for k, v in event.items() if k != "reason"
    }, "identifiers and JSON are never rewritten"
    word = f"{name}{secret}{name}"
    assert redact(f"model {word}", env, words=True) == f"model {word}"


def test_a_short_key_quoted_by_the_upstream_is_redacted(tmp_path: Path, fake: FakeUpstream) -> None:
    short = "k3y"
    harness = Harness(tmp_path, fake, rag=False)
    harness.preparer.env[API_KEY_ENV] = harness.runner.env[API_KEY_ENV] = short
    outcome = harness.tick([Step(status=401, error_message="Incorrect API key provided: {key}")])
    assert outcome.status == "failed" and "[redacted:OPENAI_API_KEY]" in str(outcome.reason)
    stored = str([e.data for e in harness.events(outcome)])
    for text in (str(outcome.reason), stored, outcome.result_path.read_text()):
        assert "provided: k3y" not in text
    if outcome.log_path.exists():  # removed when the tick wrote nothing to it
        assert "provided: k3y" not in outcome.log_path.read_text()


@given(urls=st.lists(st.from_regex(r"json://[a-z]{3,9}/[A-Za-z0-9]{8,20}", fullmatch=True)))
def test_each_alert_url_of_a_list_is_a_secret_of_its_own(urls: list[str]) -> None:
    env = {ALERT_URLS_ENV: ", ".join(urls)}
    for url in urls:
        assert url not in redact(f"could not deliver to {url}", env)


def test_a_collectors_token_is_a_secret_however_its_header_quotes_it() -> None:
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "x-team=night,authorization=Bearer%20otel-tok-5e1f0c9a"}
    for quoted in ("Bearer otel-tok-5e1f0c9a", "token otel-tok-5e1f0c9a refused"):
        assert "otel-tok-5e1f0c9a" not in redact(f"the collector answered 401: {quoted}", env)


def test_a_withheld_secret_leaves_the_environment_and_stays_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, value = "TICKWORK_TEST_WITHHELD_TOKEN", "withheld-SECRET-31c7a9e2"
    register_secret_names([name])
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("TICKWORK_TEST_WITHHELD_SETTING", "plain")
    withhold_environment("TICKWORK_TEST_WITHHELD_")
    assert not [key for key in os.environ if key.startswith("TICKWORK_TEST_WITHHELD_")]
    assert redact(f"the exporter said {value}") == f"the exporter said [redacted:{name}]"


def test_the_schema_needs_the_token_and_no_page_loads_from_a_cdn(
    tmp_path: Path, sqlite_url: str
) -> None:
    store = open_store(sqlite_url)
    try:
        with serving(settings_for(sqlite_url, tmp_path, token=API_TOKEN), store) as http:
            assert http.get("/openapi.json").status_code == 401
            authorized = {"Authorization": f"Bearer {API_TOKEN}"}
            assert "/ticks" in http.get("/openapi.json", headers=authorized).json()["paths"]
            for page in ("/docs", "/redoc"):
                assert http.get(page, headers=authorized).status_code == 404
    finally:
        store.close()
