"""A runner wired to the fake upstream and a store: the harness of tests that run real ticks."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from harness.config import LevelConfig, PathsConfig, RagConfig, RunnerConfig, Settings, StoreConfig
from harness.contracts import AGENT_CLIS, APIS, BudgetSpent, Capabilities, strands_tools
from harness.contracts.agents import AgentKind, missing_agent
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.execution.executors import LocalExecutor
from harness.execution.launchers import Launcher, WarmLauncher, shared_warm_launcher
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner, TickOutcome
from harness.scheduling.waves import SlotClaim, claim_wave
from harness.store import DRIVER_PRELOAD, StoredEvent, open_store
from tests.store_support import migrated_sqlite

SECRET = "sk-tickwork-test-SECRET-0123456789"
NAMED_UPSTREAM = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
"""A tick environment naming an upstream (never called) for ticks whose worker asks no
model: without one, an OpenAI level would go to api.openai.com with no key, and is refused."""


def make_settings(tmp_path: Path, **level: object) -> Settings:
    fields: dict[str, object] = {
        "every": "1m",
        "prompt": "Check the pager.",
        "model": "fake-model",
        "rag": True,
        "timeout_seconds": 60,
    }
    fields.update(level)
    return Settings(
        store=StoreConfig(url=f"sqlite:///{tmp_path}/events.db"),
        paths=PathsConfig(results=tmp_path / "results", spool=tmp_path / "spool"),
        rag=RagConfig(index=tmp_path / "rag.db"),
        runner=RunnerConfig(grace_seconds=1.0, retry_backoff_seconds=0.05),
        levels={"min": LevelConfig(**fields)},  # type: ignore[arg-type]
    )


EVERY_PRELOAD = frozenset(
    {*APIS, *AGENT_CLIS, DRIVER_PRELOAD}.union(
        *(strands_tools(Capabilities(tier, web=True)) for tier in ("read", "files", "full"))
    )
)
"""What any test level may need preloaded: every protocol, agent CLI and Strands tool, and
PostgreSQL's driver (a runner on a PostgreSQL store asks for it: without it here, the
shared server was replaced and warmed again)."""


def ready_launcher() -> WarmLauncher:
    """The process's shared warm launcher, preloading everything, once its server is ready.

    A tick started while its fork server warms waits up to `runner.WARM_UP_WAIT` (15 s)
    and then starts cold beside the warm-up, and a server that lacks what a level needs is
    replaced by one that warms again: the first ticks of a test process, and of each new
    kind of level, paid a wall-clock wait and a cold start (~2 s of CPU) each. One server
    that preloads everything, waited for once (the event, not a deadline), starts every
    test tick warm.
    """
    launcher = shared_warm_launcher(EVERY_PRELOAD)
    assert launcher.wait_ready(120), "the shared fork server did not get ready"
    return launcher


class Harness:
    """A runner wired to the fake upstream, and the store it records into."""

    def __init__(
        self,
        tmp_path: Path,
        fake: FakeUpstream,
        launcher: Launcher | None = None,
        **level: object,
    ) -> None:
        self.settings = make_settings(tmp_path, **level)
        self.store = open_store(migrated_sqlite(tmp_path))
        self.fake = fake
        env = {
            **os.environ,
            "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": SECRET,
            "ANTHROPIC_BASE_URL": fake.base_url("anthropic"),
            "ANTHROPIC_API_KEY": SECRET,
            "OLLAMA_HOST": fake.base_url("ollama"),
        }
        env.pop("TICKWORK_MAX_TOOL_CALLS", None)
        self.preparer = Preparer(self.settings, self.store, env=env)
        self.runner = Runner(self.settings, self.store, launcher or ready_launcher(), env=env)

    def tick(self, steps: list[Step], timeout: float | None = None) -> TickOutcome:
        prepared = self.preparer.prepare("min", timeout=timeout)
        self.fake.script(prepared.payload.tick_id, steps)
        return self.runner.run(prepared)

    def events(self, outcome: TickOutcome) -> list[StoredEvent]:
        return self.store.read_stream(f"tick-{outcome.tick_id}")

    def without_retries(self) -> Harness:
        """A timeout is an infrastructure failure: here one attempt shows the whole of it."""
        self.settings = self.settings.model_copy(
            update={"runner": self.settings.runner.model_copy(update={"infra_retries": 0})}
        )
        self.runner.settings = self.settings
        return self


WORKER_RECORDS = frozenset({"TranscriptEntry", "ModelCallStarted", "ModelCalled", "BudgetSpent"})
"""What a tick said and each model call it made and spent: beside its lifecycle, not part
of it (and whether a call a kill cut off started, or was booked, depends on timing)."""


def lifecycle(events: list[StoredEvent]) -> list[str]:
    """The types of a tick's events without its transcript and model calls."""
    return [e.type for e in events if e.type not in WORKER_RECORDS]


def calls(*names: str) -> Step:
    return Step(tool_calls=[ToolCallSpec(name=n, arguments={"question": "pager"}) for n in names])


def live_in_group(pgid: int) -> list[int]:
    """Processes of the group that still run (a zombie has exited; its parent reaps it)."""
    alive = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return alive


def require_cli(kind: AgentKind) -> None:
    """Skip when the agent CLI is missing here, unless under CI, where that fails the test."""
    missing = missing_agent(kind, None)
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(missing)
    pytest.skip(missing)


def billed_and_spent(
    fake: FakeUpstream, events: list[StoredEvent], tick_id: str
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(prompt, completion) of each call the fake billed the tick, and of each `BudgetSpent`."""
    billed = [(e.prompt_tokens, e.completion_tokens) for e in fake.ledger if e.key == tick_id]
    spent = [
        (e.data["prompt_tokens"], e.data["completion_tokens"])
        for e in events
        if e.type == BudgetSpent.type
    ]
    return billed, spent


def assert_capped(outcome: TickOutcome, cap: int, executed: int, cancelled: int) -> None:
    """The tick completed as a capped one: the cap's stop reason and text, its tool counts."""
    assert outcome.status == "completed", outcome.reason
    result = outcome.result
    assert result is not None and result.stop_reason == "tool_budget"
    assert result.text.startswith(f"Stopped: the tool budget of {cap} calls")
    assert (result.tool_calls.executed, result.tool_calls.cancelled) == (executed, cancelled)


def run_claims(
    harness: Harness,
    fake: FakeUpstream,
    executor: LocalExecutor,
    claims: list[SlotClaim],
    steps: list[Step],
) -> list[StoredEvent]:
    """Claim `claims` in one wave, each scripted `steps`, run them all; their events."""
    for claim in claims:
        fake.script(claim.tick_id, list(steps))
    assert claim_wave(harness.store, harness.settings, claims) == {c.tick_id for c in claims}
    for claim in claims:
        executor.submit(claim)
    executor.wait_idle(120)
    executor.shutdown(grace=0)
    return [e for c in claims for e in harness.store.read_stream(f"tick-{c.tick_id}")]
