"""Routed ticks end to end: decisions recorded, fallback, the availability cache, promotion.

Real worker subprocesses against the fake upstream on real sockets; a candidate that
refuses is a closed port, one that fails is a second fake answering 503.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from itertools import pairwise
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.api.reads import Reads
from harness.config import (
    LevelConfig,
    PathsConfig,
    RoutingConfig,
    RunnerConfig,
    Settings,
    StoreConfig,
)
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner, TickOutcome
from harness.routing.catalog import parse_catalog
from harness.store import SqlEventStore, StoredEvent, open_store
from tests.commands import (
    Output,
    fake_server,
    forked_cli,
    free_port,
    start_service,
    write_config,
)
from tests.tick_support import ready_launcher
from tests.waiting import long_enough, wait_until
from workers import CallBooking, CallFacts

SECRET = "sk-tickwork-catalog-SECRET-9876543210"
KEY_ENV = "TICKWORK_TEST_CLOUD_KEY"
LOCAL_URL_ENV = "TICKWORK_LOCAL_LLM_URL"
CHEAP = {"input_per_mtok": 0.5, "output_per_mtok": 1.0}


@pytest.fixture
def broken() -> Iterator[FakeUpstream]:
    """An upstream that answers every request with 503."""
    with fake_server([Step(status=503)] * 50) as server:
        yield server


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


def target(url: str, model: str) -> dict[str, Any]:
    return {"model": model, "execution_class": "cloud", "base_url": url, "api_key_env": KEY_ENV}


def write_catalog(path: Path, targets: dict[str, Any], candidates: list[str], **extra: Any) -> Path:
    document = {
        "schema_version": 1,
        "targets": targets,
        "lanes": {
            "min": {"rule_id": "min-rule", "reason_codes": ["test"], "candidates": candidates}
        },
        **extra,
    }
    path.write_text(json.dumps(document))
    return path


class Routed:
    """A runner on a catalog, the store it records into, and the fake it talks to."""

    def __init__(
        self,
        tmp_path: Path,
        store_url: str,
        catalog: Path,
        ttl: float = 300,
        content_retries: int = 1,
        env: dict[str, str] | None = None,
        **level: Any,
    ) -> None:
        self.settings = Settings(
            store=StoreConfig(url=store_url),
            paths=PathsConfig(results=tmp_path / "results", spool=tmp_path / "spool"),
            runner=RunnerConfig(
                grace_seconds=1,
                infra_retries=0,
                content_retries=content_retries,
                retry_backoff_seconds=0.05,
            ),
            routing=RoutingConfig(catalog=catalog, availability_ttl_seconds=ttl),
            levels={
                "min": LevelConfig(
                    every="1m", prompt="Check the pager.", timeout_seconds=60, **level
                )
            },
        )
        self.store: SqlEventStore = open_store(store_url)
        service_env = {**os.environ, KEY_ENV: SECRET, **(env or {})}
        service_env.pop("OPENAI_BASE_URL", None)
        self.preparer = Preparer(self.settings, self.store, env=service_env)
        self.runner = Runner(self.settings, self.store, ready_launcher(), env=service_env)

    def tick(self, fake: FakeUpstream, steps: list[Step]) -> tuple[TickOutcome, list[StoredEvent]]:
        prepared = self.preparer.prepare("min")
        fake.script(prepared.payload.tick_id, steps)
        outcome = self.runner.run(prepared)
        return outcome, self.store.read_stream(f"tick-{outcome.tick_id}")


def of_type(events: list[StoredEvent], kind: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == kind]


def test_a_refusing_first_candidate_falls_back_and_the_decision_is_recorded(
    tmp_path: Path, store_url: str, fake: FakeUpstream
) -> None:
    targets = {
        "dead": target(closed_port_url(), "dead-model"),
        "alive": target(fake.url, "alive-model"),
    }
    catalog = write_catalog(tmp_path / "catalog.json", targets, ["dead", "alive"])
    routed = Routed(tmp_path, store_url, catalog)
    outcome, events = routed.tick(fake, [Step(text="Answered by the second candidate.")])

    assert outcome.status == "completed", outcome.reason
    assert outcome.result is not None and outcome.result.target == "alive"
    (scheduled,) = of_type(events, "TickScheduled")
    revision = parse_catalog(json.loads(catalog.read_text())).revision
    assert scheduled["candidates"] == ["dead", "alive"]
    assert (scheduled["rule_id"], scheduled["reason_codes"], scheduled["window"]) == (
        "min-rule",
        ["test"],
        None,
    )
    assert scheduled["catalog_revision"] == revision
    assert scheduled["route_id"] == f"min/always@{revision[:12]}"
    assert scheduled["policy_priority"] == 0
    assert scheduled["model"] == "dead-model"
    (fallback,) = of_type(events, "RouteFallback")
    assert (fallback["from_target"], fallback["to_target"], fallback["cached"]) == (
        "dead",
        "alive",
        False,
    )
    assert "APIConnectionError" in fallback["reason"]
    assert [s["model"] for s in of_type(events, "BudgetSpent")] == ["alive-model"]
    assert [e.model for e in fake.ledger if e.key == outcome.tick_id] == ["alive-model"]
    assert events[-1].type == "TickCompleted"


def test_a_failing_candidate_is_passed_over_until_its_availability_expires(
    tmp_path: Path, store_url: str, fake: FakeUpstream, broken: FakeUpstream
) -> None:
    Ticks = tuple[Routed, TickOutcome, list[StoredEvent], TickOutcome, list[StoredEvent]]

    def two_ticks(ttl: float) -> Ticks:
        # Targets of the attempt's own: no earlier attempt's observation holds them down.
        flaky, steady = f"flaky-{ttl:g}", f"steady-{ttl:g}"
        targets = {
            flaky: target(broken.url, "flaky-model"),
            steady: target(fake.url, "steady-model"),
        }
        catalog = write_catalog(tmp_path / f"catalog-{ttl:g}.json", targets, [flaky, steady])
        routed = Routed(tmp_path / f"ttl-{ttl:g}", store_url, catalog, ttl=ttl)
        first, first_events = routed.tick(fake, [Step(text="one")])
        second, second_events = routed.tick(fake, [Step(text="two")])
        return routed, first, first_events, second, second_events

    def decided_within_the_ttl(ticks: Ticks) -> bool:
        """The second tick chose its candidate before the first one's observation expired.

        Its first fallback is recorded after that choice, so a fallback within the TTL
        means the choice was; one after it may only show a machine too slow for this TTL.
        """
        routed, _, first_events, _, second_events = ticks
        fallbacks = [of_type(events, "RouteFallback") for events in (first_events, second_events)]
        if not all(fallbacks):
            return True  # nothing to wait longer for: the assertions judge
        observed, passed_over = (datetime.fromisoformat(f[0]["occurred_at"]) for f in fallbacks)
        ttl = timedelta(seconds=routed.settings.routing.availability_ttl_seconds)
        return passed_over < observed + ttl

    routed, first, first_events, second, second_events = long_enough(
        two_ticks, decided_within_the_ttl, first=2, cap=32
    )
    assert [first.status, second.status] == ["completed", "completed"]
    assert first.tick_id in broken.state.first_request
    assert second.tick_id not in broken.state.first_request, "a known-down target was retried"
    (observed,) = [e for e in first_events if e.type == "RouteFallback"]
    assert not observed.data["cached"] and "503" in observed.data["reason"]
    (passed_over,) = of_type(second_events, "RouteFallback")
    assert passed_over["cached"] and passed_over["reason"].startswith("unavailable: ")

    ttl = routed.settings.routing.availability_ttl_seconds
    expired = datetime.fromisoformat(observed.data["occurred_at"]) + timedelta(seconds=ttl)
    wait_until(lambda: datetime.now(UTC) > expired, "the observation's TTL to pass")
    third, third_events = routed.tick(fake, [Step(text="three")])
    assert third.status == "completed"
    assert third.tick_id in broken.state.first_request, "the target was not tried after its TTL"
    assert [f["cached"] for f in of_type(third_events, "RouteFallback")] == [False]
    catalog = tmp_path / f"catalog-{ttl:g}.json"
    revision = parse_catalog(json.loads(catalog.read_text())).revision
    (recorded,) = routed.store.read_stream(f"catalog-{revision}")
    assert recorded.type == "CatalogRecorded", "three ticks store their one catalog once"


def test_a_target_reads_its_endpoint_from_a_tickwork_variable_and_no_other_one(
    tmp_path: Path, sqlite_url: str, fake: FakeUpstream
) -> None:
    """As the example catalog's local target does (`base_url_env = "TICKWORK_LOCAL_LLM_URL"`).

    The worker gets the variables its candidates name, whatever their prefix, and none of
    the service's other `TICKWORK_*` settings.
    """
    local = {"model": "local-model", "execution_class": "local", "base_url_env": LOCAL_URL_ENV}
    catalog = write_catalog(tmp_path / "catalog.json", {"local": local}, ["local"])
    env = {LOCAL_URL_ENV: fake.url, "TICKWORK_UNNAMED_URL": "http://elsewhere.invalid/v1"}
    routed = Routed(tmp_path, sqlite_url, catalog, env=env, can_shell=True)
    read_env = Step(tool_calls=[ToolCallSpec(name="shell", arguments={"command": "env"})])
    outcome, events = routed.tick(fake, [read_env, Step(text="done")])
    assert outcome.status == "completed", outcome.reason
    assert [s["model"] for s in of_type(events, "BudgetSpent")] == ["local-model"] * 2
    told = str(fake.state.received[-1]["messages"])
    assert f"{LOCAL_URL_ENV}={fake.url}" in told, "the shell's output reached the model"
    for unnamed in ("TICKWORK_UNNAMED_URL", KEY_ENV, SECRET):
        assert unnamed not in told


def test_the_last_candidate_failing_is_recorded_and_the_tick_fails_on_infrastructure(
    tmp_path: Path, store_url: str, broken: FakeUpstream
) -> None:
    catalog = write_catalog(tmp_path / "catalog.json", {"only": target(broken.url, "m")}, ["only"])
    routed = Routed(tmp_path, store_url, catalog)
    outcome, events = routed.tick(broken, [])
    assert outcome.status == "failed"
    assert events[-1].data["failure_class"] == "infrastructure"
    (fallback,) = of_type(events, "RouteFallback")
    assert (fallback["from_target"], fallback["to_target"]) == ("only", None)


def test_a_candidate_whose_variables_are_unset_is_passed_over_for_the_next(
    tmp_path: Path, store_url: str, fake: FakeUpstream
) -> None:
    unset_url, unset_key = "TICKWORK_TEST_UNSET_URL", "TICKWORK_TEST_UNSET_KEY"
    assert unset_url not in os.environ and unset_key not in os.environ
    targets = {
        "no-url": {"model": "m1", "execution_class": "cloud", "base_url_env": unset_url},
        "no-key": {**target(fake.url, "m2"), "api_key_env": unset_key},
        "alive": target(fake.url, "alive-model"),
    }
    catalog = write_catalog(tmp_path / "catalog.json", targets, ["no-url", "no-key", "alive"])
    routed = Routed(tmp_path, store_url, catalog)
    outcome, events = routed.tick(fake, [Step(text="Answered by the third candidate.")])

    assert outcome.status == "completed", outcome.reason
    assert outcome.result is not None and outcome.result.target == "alive"
    fallbacks = of_type(events, "RouteFallback")
    assert [(f["from_target"], f["to_target"]) for f in fallbacks] == [
        ("no-url", "no-key"),
        ("no-key", "alive"),
    ]
    assert unset_url in fallbacks[0]["reason"] and unset_key in fallbacks[1]["reason"]
    assert all(f["cached"] for f in fallbacks), "an unset variable says nothing of the endpoint"
    assert [e.model for e in fake.ledger if e.key == outcome.tick_id] == ["alive-model"]

    alone = write_catalog(tmp_path / "alone.json", {"no-key": targets["no-key"]}, ["no-key"])
    outcome, events = Routed(tmp_path / "alone", store_url, alone).tick(fake, [])
    assert outcome.status == "failed"
    assert events[-1].data["failure_class"] == "configuration"
    assert unset_key in events[-1].data["reason"]
    (last,) = of_type(events, "RouteFallback")
    assert (last["from_target"], last["to_target"]) == ("no-key", None)


class QuotaServer:
    """A provider's quota endpoint on a real socket: answers what `remaining` is set to."""

    def __init__(self) -> None:
        self.remaining = 5
        self.seen: list[str] = []
        quota = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                quota.seen.append(self.headers.get("X-Quota-Token", ""))
                body = json.dumps({"data": {"limits": [{"remaining": quota.remaining}]}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/quota"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_quota_probes_pass_over_a_target_whose_quota_ran_out(
    tmp_path: Path, sqlite_url: str, fake: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    quota = QuotaServer()
    monkeypatch.setenv("TICKWORK_TEST_QUOTA_TOKEN", "quota-token-SECRET-1234")
    probe: dict[str, Any] = {
        "url": quota.url,
        "header": "X-Quota-Token",
        "header_env": "TICKWORK_TEST_QUOTA_TOKEN",
        "remaining_path": "data.limits.0.remaining",
        "minimum": 2.0,
        "ttl_seconds": 300.0,
    }
    targets = {
        "metered": {**target(fake.url, "metered-model"), "quota_probe": probe},
        "spare": target(fake.url, "spare-model"),
    }
    path = write_catalog(tmp_path / "catalog.json", targets, ["metered", "spare"])
    routed = Routed(tmp_path, sqlite_url, path)
    limits = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "900"}
    try:
        first, first_events = routed.tick(fake, [Step(text="one", headers=limits)])
        quota.remaining = 1
        second, second_events = routed.tick(fake, [Step(text="two")])
        assert [first.status, second.status] == ["completed", "completed"]
        assert quota.seen == ["quota-token-SECRET-1234"], "the store's probe result was not reused"
        probed, answered = of_type(first_events, "QuotaObserved")
        assert (probed["source"], probed["remaining"], probed["exhausted"]) == ("probe", 5, False)
        assert (answered["source"], answered["requests_left"], answered["tokens_left"]) == (
            "answer",
            0,
            900,
        )
        assert first.result is not None and first.result.target == "metered"
        assert second.result is not None and second.result.target == "spare"
        (passed_over,) = of_type(second_events, "RouteFallback")
        assert passed_over["reason"].startswith("quota: requests left 0"), passed_over

        probe["ttl_seconds"] = 0.001  # every earlier observation is stale now
        write_catalog(path, targets, ["metered", "spare"])
        assert routed.preparer.router is not None
        routed.preparer.router.source.poll()
        third, third_events = routed.tick(fake, [Step(text="three")])
        assert third.status == "completed" and len(quota.seen) == 2
        assert third.result is not None and third.result.target == "spare"
        (ran_out,) = of_type(third_events, "QuotaObserved")
        assert (ran_out["remaining"], ran_out["exhausted"]) == (1, True)
        (passed_over,) = of_type(third_events, "RouteFallback")
        assert passed_over["reason"].startswith("quota: 1 left, minimum 2 (probe at ")

        probe.pop("url")
        probe["command"] = [
            sys.executable,
            "-c",
            'print(\'{"data": {"limits": [{"remaining": 0}]}}\')',
        ]
        write_catalog(path, {"metered": targets["metered"]}, ["metered"])
        routed.preparer.router.source.poll()
        fourth, fourth_events = routed.tick(fake, [Step(text="never")])
        assert fourth.status == "failed" and fourth_events[-1].data["failure_class"] == (
            "infrastructure"
        )
        (last,) = of_type(fourth_events, "RouteFallback")
        assert (last["to_target"], last["reason"][:22]) == (None, "quota: 0 left, minimum")
        assert not [e for e in fake.ledger if e.key == fourth.tick_id]
    finally:
        quota.server.shutdown()
    for file in tmp_path.rglob("*"):
        if file.is_file():
            assert b"quota-token-SECRET-1234" not in file.read_bytes(), file


@pytest.mark.parametrize(
    ("capacities", "ran_on", "reason"),
    [
        ({"overall": 40, "model:metered-model": 3}, "metered", None),
        (
            {"overall": 40, "model:metered-model": 0},
            "spare",
            "quota: capacity model:metered-model: 0 left, minimum 1 (probe at ",
        ),
        (
            {"overall": 0.5, "model:metered-model": 3},
            "spare",
            "quota: capacity overall: 0.5 left, minimum 1 (probe at ",
        ),
        (
            {"overall": 40},
            "spare",
            "quota: probe failed: the answer lists no capacity 'model:metered-model'",
        ),
    ],
    ids=["both-left", "model-spent", "account-spent", "model-unlisted"],
)
def test_a_quota_probe_requires_each_capacity_it_names(
    tmp_path: Path,
    sqlite_url: str,
    fake: FakeUpstream,
    capacities: dict[str, float],
    ran_on: str,
    reason: str | None,
) -> None:
    """A model's own limit can run out while the account still has quota, and vice versa."""
    answer = json.dumps({"quotas": capacities, "plan": "team"})
    probe = {
        "command": [sys.executable, "-c", f"print({answer!r})"],
        "remaining_path": "quotas",
        "required_capacities": ["overall", "model:metered-model"],
    }
    targets = {
        "metered": {**target(fake.url, "metered-model"), "quota_probe": probe},
        "spare": target(fake.url, "spare-model"),
    }
    path = write_catalog(tmp_path / "catalog.json", targets, ["metered", "spare"])
    outcome, events = Routed(tmp_path, sqlite_url, path).tick(fake, [Step(text="done")])
    assert outcome.status == "completed"
    assert outcome.result is not None and outcome.result.target == ran_on
    fallbacks = [f["reason"] for f in of_type(events, "RouteFallback")]
    assert fallbacks == ([] if reason is None else [fallbacks[0]]), fallbacks
    if reason is not None:
        assert fallbacks[0].startswith(reason), fallbacks
    (probed,) = of_type(events, "QuotaObserved")
    assert probed["exhausted"] is (reason is not None)


def test_a_target_answers_a_self_check_before_it_first_runs_and_after_it_was_down(
    tmp_path: Path, store_url: str, fake: FakeUpstream
) -> None:
    targets = {
        "checked": {**target(fake.url, "checked-model"), "selfcheck_required": True},
        "spare": target(fake.url, "spare-model"),
    }
    path = write_catalog(tmp_path / "catalog.json", targets, ["checked", "spare"])
    routed = Routed(tmp_path, store_url, path, ttl=0)  # a target down is tried again at once

    def tick(*steps: Step) -> tuple[str | None, list[str], list[tuple[bool, str | None]]]:
        """Where the tick ran, the models it called, and the self-checks it recorded."""
        outcome, events = routed.tick(fake, list(steps))
        assert outcome.status == "completed" and outcome.result is not None
        called = [e.model for e in fake.ledger if e.key == outcome.tick_id]
        assert len(of_type(events, "BudgetSpent")) == len(called), "a self-check went unbooked"
        checks = [(c["passed"], c["detail"]) for c in of_type(events, "TargetSelfChecked")]
        assert all(c["target"] == "checked" for c in of_type(events, "TargetSelfChecked"))
        return outcome.result.target, called, checks

    ran, called, checks = tick(Step(text=" "), Step(text="on spare"))
    assert (ran, called) == ("spare", ["checked-model", "spare-model"])
    assert checks == [(False, "SelfCheckFailedError: checked answered with no text")]
    ran, called, checks = tick(Step(text="OK"), Step(text="first"))
    assert (ran, called, checks) == ("checked", ["checked-model"] * 2, [(True, None)])
    ran, called, checks = tick(Step(text="second"))
    assert (ran, called, checks) == ("checked", ["checked-model"], []), "checked twice"
    ran, called, checks = tick(Step(status=503), Step(text="on spare"))  # a 503 bills nothing
    assert (ran, called, checks) == ("spare", ["spare-model"], [])
    ran, called, checks = tick(Step(text="OK"), Step(text="back"))
    assert (ran, called, checks) == ("checked", ["checked-model"] * 2, [(True, None)])


def test_content_failures_promote_to_the_stronger_target(
    tmp_path: Path, store_url: str, fake: FakeUpstream
) -> None:
    big = {**target(fake.url, "big-model"), "billing": "subscription"}
    targets = {"small": target(fake.url, "small-model"), "big": big}
    catalog = write_catalog(
        tmp_path / "catalog.json", targets, ["small"], promotions={"small": "big"}
    )
    routed = Routed(tmp_path, store_url, catalog, content_retries=1)
    outcome, events = routed.tick(fake, [Step(text=" "), Step(text=" "), Step(text="Big answers.")])

    assert outcome.status == "completed", outcome.reason
    assert outcome.result is not None and outcome.result.target == "big"
    assert [e.model for e in fake.ledger if e.key == outcome.tick_id] == [
        "small-model",
        "small-model",
        "big-model",
    ]
    (promoted,) = of_type(events, "RoutePromoted")
    assert (promoted["from_target"], promoted["to_target"], promoted["attempt"]) == (
        "small",
        "big",
        2,
    )
    assert "EmptyText" in promoted["reason"]
    booked = [
        (s["target"], s["billing"], s["price_source"]) for s in of_type(events, "BudgetSpent")
    ]
    assert booked[-1] == ("big", "subscription", "unpriced"), "at its own price and billing"
    kinds = [e.type for e in events]
    assert kinds.count("TickStarted") == 3 and kinds[-1] == "TickCompleted"
    catalog.write_text(catalog.read_text().replace("small-model", "renamed-model"))
    detail = Reads(routed.settings, routed.store).tick(outcome.tick_id)
    assert detail is not None and detail.targets is not None, "the tick page names its targets"
    assert {name: t["model"] for name, t in detail.targets.items()} == {
        "small": "small-model",
        "big": "big-model",
    }, "the targets are the decision's, not the edited file's"


def test_without_a_promotion_content_retries_end_the_tick(
    tmp_path: Path, store_url: str, fake: FakeUpstream
) -> None:
    catalog = write_catalog(tmp_path / "catalog.json", {"small": target(fake.url, "s")}, ["small"])
    routed = Routed(tmp_path, store_url, catalog, content_retries=1)
    outcome, events = routed.tick(fake, [Step(text=" "), Step(text=" "), Step(text="never")])
    assert outcome.status == "failed"
    assert [e.type for e in events].count("TickStarted") == 2
    assert not of_type(events, "RoutePromoted")


def test_no_api_key_lands_anywhere_on_the_catalog_path(
    tmp_path: Path, sqlite_url: str, fake: FakeUpstream
) -> None:
    targets = {"dead": target(closed_port_url(), "d"), "alive": target(fake.url, "a")}
    catalog = write_catalog(tmp_path / "catalog.json", targets, ["dead", "alive"])
    routed = Routed(tmp_path, sqlite_url, catalog)
    prepared = routed.preparer.prepare("min")
    fake.script(prepared.payload.tick_id, [Step(text="ok")])
    assert routed.runner.run(prepared).status == "completed"
    routed.store.close()
    assert SECRET not in prepared.payload.model_dump_json()
    assert KEY_ENV in prepared.payload.model_dump_json()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"the API key leaked into {path}"


def test_a_bad_catalog_exits_2_with_its_paths_and_stores_nothing(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    catalog = write_catalog(tmp_path / "catalog.json", {"a": target(fake.url, "m")}, ["a", "ghost"])
    level = '[levels.min]\nevery = "1m"\nprompt = "hi"\n'
    store = f"sqlite:///{tmp_path}/events.db"  # not made yet: a refusal must not make it
    config = write_config(tmp_path, f'[routing]\ncatalog = "{catalog}"\n{level}', store_url=store)
    for command in ("tick min", "run", f"catalog check {catalog}"):
        result = forked_cli(command, config, fake)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "lanes.min.candidates[1]: unknown target 'ghost'" in result.stderr
    assert not (tmp_path / "events.db").exists()


def test_catalog_route_prints_the_decision_and_refuses_naive_times(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    example = Path(__file__).resolve().parent.parent / "ops" / "catalog.example.toml"
    config = write_config(tmp_path, f'[routing]\ncatalog = "{example}"\n')
    check = forked_cli(f"catalog check {example}", config, fake)
    assert check.returncode == 0, check.stderr
    revision = check.stdout.split("revision")[1].split()[0]
    night = forked_cli("catalog route hour --at 2026-07-15T23:00:00+02:00", config, fake)
    assert night.returncode == 0, night.stderr
    lines = dict(line.split(None, 1) for line in night.stdout.splitlines())
    assert lines["window"] == "night" and lines["rule"] == "hour-night-local"
    assert lines["candidates"] == "local-qwen" and lines["revision"] == revision
    assert lines["route"] == f"hour/night@{revision[:12]}"
    day = forked_cli("catalog route hour --at 2026-07-15T20:59:59Z", config, fake)
    assert "window      day" in day.stdout and "cloud-mini > cloud-large" in day.stdout
    naive = forked_cli("catalog route hour --at 2026-07-15T23:00:00", config, fake)
    assert naive.returncode == 2 and "has no time zone" in naive.stderr
    unknown = forked_cli("catalog route daily", config, fake)
    assert unknown.returncode == 2 and "no lane for level 'daily'" in unknown.stderr


def test_a_running_service_reloads_on_sighup_and_keeps_the_old_catalog_when_invalid(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    catalog = tmp_path / "catalog.json"
    targets = {"a": target(fake.url, "model-a"), "b": target(fake.url, "model-b")}
    write_catalog(catalog, targets, ["a"])
    first = parse_catalog(json.loads(catalog.read_text())).revision
    level = '[levels.min]\nevery = "1s"\nprompt = "hi"\ntimeout_seconds = 30\n'
    config = write_config(tmp_path, f'[routing]\ncatalog = "{catalog}"\n{level}')
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    service = Output(start_service(config, fake))
    try:
        assert _next_scheduled(store)["catalog_revision"] == first
        # The fork server preloads the protocols of the catalog's targets, not every one.
        assert wait_until(lambda: preloaded(service.process.pid), "a fork server") == {
            "openai-chat"
        }
        catalog.write_text(catalog.read_text().replace('["a"]', '["ghost"]'))
        service.process.send_signal(signal.SIGHUP)
        service.wait_for(f"catalog {catalog} rejected (")
        kept = _next_scheduled(store)
        assert (kept["catalog_revision"], kept["candidates"]) == (first, ["a"])
        write_catalog(catalog, targets, ["b", "a"])
        second = parse_catalog(json.loads(catalog.read_text())).revision
        reloaded = _next_scheduled(store, revision=second)
        assert reloaded["candidates"] == ["b", "a"] and reloaded["model"] == "model-b"
    finally:
        output = service.stop()
        store.close()
    assert service.process.returncode == 0, output
    assert f"): revision {first[:12]} stays in force\n" in output
    assert "lanes.min.candidates[0]: unknown target 'ghost'" in output
    assert f"reloaded: revision {first[:12]} -> {second[:12]}" in output
    for revision, candidates in ((first, ["a"]), (second, ["b", "a"])):
        shown = forked_cli(f"catalog show --revision {revision[:12]}", config, fake)
        assert shown.returncode == 0, shown.stderr
        document = json.loads(shown.stdout)
        assert document["revision"] == revision
        assert document["catalog"]["lanes"]["min"]["candidates"] == candidates
    missing = forked_cli("catalog show --revision 0123456789ab", config, fake)
    assert missing.returncode == 2 and "no catalog with revision 0123456789ab" in missing.stderr


def preloaded(pid: int) -> set[str]:
    """What the fork servers below `pid` were started to preload (their `--preload` names)."""
    names: set[str] = set()
    for process in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            line = process.cmdline()
            if "harness.execution.launchers.forkserver" in line:
                names.update(value for flag, value in pairwise(line) if flag == "--preload")
    return names


def _next_scheduled(store: SqlEventStore, revision: str | None = None) -> dict[str, Any]:
    """The next TickScheduled appended from now on (with `revision`, if given)."""
    mark = store.last_position()

    def scheduled() -> dict[str, Any] | None:
        for event in store.read_all(mark, 100_000, ["TickScheduled"]):
            if revision is None or event.data["catalog_revision"] == revision:
                return event.data
        return None

    return wait_until(scheduled, f"a tick scheduled (revision {revision})", interval=0.2)


def test_a_level_without_a_lane_runs_its_configured_model(tmp_path: Path, sqlite_url: str) -> None:
    catalog = write_catalog(tmp_path / "catalog.json", {"a": target("http://h/v1", "lane")}, ["a"])
    # The level without a lane goes to OpenAI's own host, which takes a key.
    routed = Routed(tmp_path, sqlite_url, catalog, env={"OPENAI_API_KEY": SECRET})
    other = LevelConfig(every="1h", prompt="hi", model="configured-model")
    levels = {**routed.settings.levels, "other": other}
    routed.preparer.settings = routed.settings.model_copy(update={"levels": levels})
    plain = routed.preparer.prepare("other")
    assert (plain.payload.model, plain.payload.route, plain.routed) == (
        "configured-model",
        None,
        None,
    )
    laned = routed.preparer.prepare("min")
    assert laned.payload.model == "lane" and laned.payload.route is not None
    routed.store.close()


def test_a_rate_limited_anthropic_target_falls_back_to_an_openai_compatible_one(
    tmp_path: Path, store_url: str, fake: FakeUpstream
) -> None:
    claude = {**target(fake.base_url("anthropic"), "claude-x"), "api": "anthropic"}
    targets = {"claude": claude, "gateway": target(fake.url, "gpt-x")}
    catalog = write_catalog(tmp_path / "catalog.json", targets, ["claude", "gateway"])
    routed = Routed(tmp_path, store_url, catalog)
    left = {"anthropic-ratelimit-requests-remaining": "0", "retry-after": "0"}
    limited = Step(status=429, headers=left)
    outcome, events = routed.tick(fake, [limited, limited, Step(text="Answered by the gateway.")])

    assert outcome.status == "completed", outcome.reason
    assert outcome.result is not None and outcome.result.target == "gateway"
    (fallback,) = of_type(events, "RouteFallback")
    assert (fallback["from_target"], fallback["to_target"]) == ("claude", "gateway")
    refused = [c for c in of_type(events, "ModelCalled") if c["error_class"]]
    assert {(c["target"], c["failure_class"]) for c in refused} == {("claude", "infrastructure")}
    assert [s["model"] for s in of_type(events, "BudgetSpent")] == ["gpt-x"]
    ledger = [(e.api, e.model) for e in fake.ledger if e.key == outcome.tick_id]
    assert ledger == [("openai-chat", "gpt-x")]
    observed = {(q["target"], q["requests_left"]) for q in of_type(events, "QuotaObserved")}
    assert observed == {("claude", 0)}  # Anthropic's own rate-limit headers, read


def test_spend_prices_a_tick_routed_to_the_example_local_target_at_its_catalog_price(
    tmp_path: Path, sqlite_url: str, fake: FakeUpstream
) -> None:
    """The example catalog prices `local-qwen` at 0/0: `tickwork spend` says 0, and why.

    genai-prices does not know the target's model, so without the catalog's price the
    tick read as unpriced.
    """
    example = Path(__file__).resolve().parent.parent / "ops" / "catalog.example.toml"
    routed = Routed(tmp_path, sqlite_url, example, env={LOCAL_URL_ENV: fake.url})
    outcome, events = routed.tick(fake, [Step(text="Nothing paged.")])
    assert outcome.status == "completed", outcome.reason
    assert [s["target"] for s in of_type(events, "BudgetSpent")] == ["local-qwen"]

    config = write_config(tmp_path, f'[routing]\ncatalog = "{example}"\n', store_url=sqlite_url)
    spend = forked_cli("spend --by model --by target --json", config, fake)
    assert spend.returncode == 0, spend.stderr
    (row,) = json.loads(spend.stdout)
    assert row["group"] == {"model": "qwen2.5-32b-instruct", "target": "local-qwen"}
    assert (row["cost_usd"], row["unpriced_calls"]) == (0.0, 0)
    assert row["price_sources"] == ["catalog:local-qwen"]
    assert row["model_calls"] == 1 and row["prompt_tokens"] > 0
    (spent,) = of_type(events, "BudgetSpent")
    assert (spent["cost_usd"], spent["price_source"]) == (0.0, "catalog:local-qwen"), "as booked"


def test_a_tick_carries_its_routes_prices_and_books_each_call_at_its_targets(
    tmp_path: Path, store_url: str
) -> None:
    """The preparer looks each candidate's price up once; a call books it with a lookup.

    A target's catalog price, else genai-prices', each naming which.
    """
    targets = {
        "cheap": {**target(closed_port_url(), "gpt-4o-mini"), "prices": CHEAP},
        "listed": target(closed_port_url(), "gpt-4o-mini"),
    }
    catalog = write_catalog(tmp_path / "catalog.json", targets, ["cheap", "listed"])
    payload = Routed(tmp_path, store_url, catalog).preparer.prepare("min").payload
    assert {(p.target, p.source) for p in payload.prices} == {
        ("cheap", "catalog:cheap"),
        ("listed", f"genai-prices@{version('genai-prices')}"),
    }
    booking = CallBooking.of(payload)
    facts = CallFacts(model="gpt-4o-mini", call=1, prompt_tokens=1_000, completion_tokens=100)
    cheap = booking.spent(replace(facts, target="cheap"))
    listed = booking.spent(replace(facts, target="listed"))
    assert cheap.cost_usd == pytest.approx((1_000 * 0.5 + 100 * 1.0) / 1e6)
    assert listed.cost_usd == pytest.approx((1_000 * 0.15 + 100 * 0.6) / 1e6)
