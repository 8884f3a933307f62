"""Per-tick overhead of each agent kind: a tick through the runner beside its CLI's bare start.

Each round runs, for every kind, one tick end to end through the runner (prepare, warm
launch, the tick, its result and terminal event), answering one scripted text turn from
the fake upstream: Strands on `openai-chat`, Claude Code on `anthropic`, OpenCode on
`openai-chat`. Beside each CLI tick, in the same round, the same CLI starts bare: the
command line, environment and configuration the tick's CLI module gives it (fresh `HOME`,
the offline switches, OpenCode's config packages), pointed at the fake directly instead of
the tick's governor, with no runner, tick process, governor or store. The difference is
what tickwork adds to a CLI tick; Strands has no CLI, so its whole tick is tickwork's.

Medians over the rounds (one warm-up round first, not counted), of wall time and of CPU:
a tick's CPU is its process's with the CLI it reaped plus the fork server's share over the
tick; a bare start's is the CLI's (its reaped children included). The runner's own CPU and
the fake's are in this process and not counted. On a loaded machine read CPU first.

    .venv/bin/python ops/bench/agent_kinds_bench.py [--runs 3] [--warm-up 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from machine import describe
from tick_bench import TimedLauncher, children_cpu, process_cpu

from harness.config import LevelConfig, PathsConfig, Settings, StoreConfig
from harness.contracts.agents import AGENT_CLIS, DEFAULT_AGENTS_DIR, AgentKind, missing_agent
from harness.contracts.payload import TickPayload
from harness.devtools.fake_llm import FakeUpstream, Step, fake_upstream
from harness.execution.launchers import WarmLauncher, preloads_of
from harness.execution.launchers.warm import ForkedTick
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.store import open_store
from workers.agents.base import CliTick, CliTranscript
from workers.agents.child import minimal_env
from workers.agents.frame import run_class
from workers.model import Target
from workers.recorder import EventRecorder

ANSWER = "Hi from the fake."
KINDS: dict[str, dict[str, str]] = {
    "strands": {"api": "openai-chat"},
    "claude-code": {"api": "anthropic", "agent": "claude-code"},
    "opencode": {"api": "openai-chat", "agent": "opencode"},
}
"""Each kind's level settings beside the prompt and model (the protocol its calls speak)."""
REFERENCE = {"claude-code": 0.24, "opencode": 3.3}
"""Issue 40's figures of today: seconds a CLI tick took over a Strands tick."""
BARE_TIMEOUT_SECONDS = 300.0


@dataclass
class Figures:
    """One kind's runs: the tick's wall and CPU, and its CLI's bare start's."""

    tick_wall: list[float] = field(default_factory=list)
    tick_cpu: list[float] = field(default_factory=list)
    bare_wall: list[float] = field(default_factory=list)
    bare_cpu: list[float] = field(default_factory=list)


def level_name(kind: str) -> str:
    return kind.replace("-", "_")


def bare_start(kind: AgentKind, payload: TickPayload, fake: FakeUpstream) -> tuple[float, float]:
    """Wall and CPU seconds of the CLI answering one turn with the tick's set-up, no tickwork.

    The fake is the CLI's endpoint (no tick governor): the tick header OpenCode's config
    sends keys the scripted answer; Claude Code sends none, so the default queue holds it.
    """
    fake.script(payload.tick_id, [Step(text=ANSWER)])
    fake.script("default", [Step(text=ANSWER)])
    with tempfile.TemporaryDirectory(prefix="bare-cli-") as folder:
        home, workdir = Path(folder) / "home", Path(folder) / "work"
        home.mkdir()
        workdir.mkdir()
        tick = CliTick(
            payload=payload,
            target=Target(payload.api, payload.model, None, None, None),
            binary=AGENT_CLIS[kind].path(DEFAULT_AGENTS_DIR),
            home=home,
            workdir=workdir,
            governor_url=fake.origin,
            hook_command="false",  # a text turn calls no tool: never asked
            hook_url="http://127.0.0.1:9/_tickwork/pretool",
            hook_token="unused",
            client_key="bare-start",
            refused_tools=set(),
            tools_asked_at={},
        )
        cli = run_class(kind)(tick, CliTranscript(payload, EventRecorder(payload), lambda: False))
        cli.prepare()
        env = minimal_env(home, cli.env())
        before, started = children_cpu(), time.monotonic()
        answer = subprocess.run(
            cli.argv(),
            input=payload.prompt.encode(),  # as the frame hands it: on stdin
            capture_output=True,
            cwd=workdir,
            env=env,
            timeout=BARE_TIMEOUT_SECONDS,
            check=False,
        )
        wall, cpu = time.monotonic() - started, children_cpu() - before
    if answer.returncode != 0 or ANSWER.encode() not in answer.stdout:
        tail = answer.stderr.decode(errors="replace")[-500:]
        raise SystemExit(f"the bare {kind} start did not answer (exit {answer.returncode}): {tail}")
    return wall, cpu


@contextmanager
def bench_settings(kinds: list[str]) -> Iterator[Settings]:
    with tempfile.TemporaryDirectory(prefix="agent-kinds-") as folder:
        root = Path(folder)
        yield Settings(
            store=StoreConfig(url=f"sqlite:///{root}/events.db"),
            paths=PathsConfig(results=root / "results", spool=root / "spool"),
            levels={
                level_name(kind): LevelConfig(
                    every="1m",
                    prompt="Say hi.",
                    model="fake-model",
                    **KINDS[kind],  # type: ignore[arg-type]
                )
                for kind in kinds
            },
        )


def measure(kinds: list[str], runs: int, warm_up: int) -> dict[str, Figures]:
    """Every kind's tick, then its CLI's bare start, in turn, round after round."""
    figures = {kind: Figures() for kind in kinds}
    with bench_settings(kinds) as settings, fake_upstream() as fake:
        store = open_store(settings.store.url)
        env = {
            **os.environ,
            "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": "bench-key",
            "ANTHROPIC_BASE_URL": fake.base_url("anthropic"),
            "ANTHROPIC_API_KEY": "bench-key",
        }
        warm = WarmLauncher(preloads=preloads_of(settings))
        assert warm.wait_ready(300), "the fork server did not warm up"
        assert warm.server_pid is not None
        launcher = TimedLauncher(warm)
        preparer = Preparer(settings, store, env=env)
        runner = Runner(settings, store, launcher, env=env)
        for round_number in range(warm_up + runs):
            for kind in kinds:
                counted = round_number >= warm_up
                before_server, started = process_cpu(warm.server_pid), time.monotonic()
                prepared = preparer.prepare(level_name(kind))
                tick = launcher.current = prepared.payload.tick_id
                fake.script(tick, [Step(text=ANSWER)])
                outcome = runner.run(prepared)
                wall = time.monotonic() - started
                assert outcome.status == "completed", outcome.reason
                assert outcome.result is not None and outcome.result.text == ANSWER
                handle = launcher.handles[tick]
                assert isinstance(handle, ForkedTick) and handle.cpu_seconds is not None, (
                    "the tick did not end on the fork server (an edit of the code retires it)"
                )
                cpu = handle.cpu_seconds + process_cpu(warm.server_pid) - before_server
                if counted:
                    figures[kind].tick_wall.append(wall)
                    figures[kind].tick_cpu.append(cpu)
                if kind == "strands":
                    continue
                bare = prepared.payload.model_copy(update={"tick_id": f"bare-{tick}"})
                bare_wall, bare_cpu = bare_start(kind, bare, fake)  # type: ignore[arg-type]
                if counted:
                    figures[kind].bare_wall.append(bare_wall)
                    figures[kind].bare_cpu.append(bare_cpu)
        store.close()
        warm.close()
    return figures


def seconds(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s" if values else "       —"


def signed(value: float | None) -> str:
    return "      —" if value is None else f"{value:+6.2f} s"


def paired(ones: list[float], others: list[float]) -> float | None:
    """The median of the round-by-round differences (both met the same load)."""
    if not ones or not others:
        return None
    return statistics.median(a - b for a, b in zip(ones, others, strict=True))


def report(figures: dict[str, Figures], runs: int) -> None:
    print(f"rounds: {runs} counted (+ warm-up), each kind's tick then its CLI's bare start")
    print("medians; wall is the load's as much as ours on a shared machine, CPU less so")
    print(
        "  kind          tick wall   tick CPU   bare wall   bare CPU"
        "   tickwork's wall    CPU   over a Strands tick: wall    CPU"
    )
    strands = figures.get("strands")
    for kind, each in figures.items():
        over_wall = over_cpu = None
        if strands is not None and kind != "strands":
            over_wall = paired(each.tick_wall, strands.tick_wall)
            over_cpu = paired(each.tick_cpu, strands.tick_cpu)
        ours_wall = paired(each.tick_wall, each.bare_wall) if each.bare_wall else None
        ours_cpu = paired(each.tick_cpu, each.bare_cpu) if each.bare_cpu else None
        if kind == "strands":  # no CLI: the whole tick is tickwork's (and Strands')
            ours_wall = statistics.median(each.tick_wall)
            ours_cpu = statistics.median(each.tick_cpu)
        print(
            f"  {kind:<12}{seconds(each.tick_wall)}  {seconds(each.tick_cpu)}"
            f"  {seconds(each.bare_wall)}  {seconds(each.bare_cpu)}"
            f"          {signed(ours_wall)} {signed(ours_cpu)}"
            f"                  {signed(over_wall)} {signed(over_cpu)}"
        )
    for kind, reference in REFERENCE.items():
        if kind in figures and strands is not None:
            over = paired(figures[kind].tick_wall, strands.tick_wall)
            verdict = "met" if over is not None and over <= reference else "not met"
            print(
                f"  issue 40's today: {kind} +{reference} s over a Strands tick (wall): {verdict}"
                f" at load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="counted rounds")
    parser.add_argument("--warm-up", type=int, default=1, help="rounds run first, not counted")
    args = parser.parse_args()
    kinds = ["strands"]
    for kind in AGENT_CLIS:
        missing = missing_agent(kind, None)
        if missing is None:
            kinds.append(kind)
        else:
            print(f"{kind}: not measured: {missing}")
    print(describe())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    figures = measure(kinds, args.runs, args.warm_up)
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(figures, args.runs)


if __name__ == "__main__":
    main()
