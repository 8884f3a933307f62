"""Tick start latency, CPU and memory per tick: the cold and the warm launcher side by side.

Cold and warm ticks alternate in one run (one-call ticks, no tools, against the fake
upstream, which answers at once), so both meet the same machine load. Start latency:
from the launcher's start to the worker's first request at the upstream. CPU per tick:
user + system time of the tick process (cold: the whole interpreter; warm: the forked
child, plus its share of the fork server's CPU over the warm ticks). Then memory: N warm
ticks (default 100) held at once in their model call, each one's unique memory (USS),
and all of them together with the server they share pages with; a few cold ticks held
the same way for comparison. Last, agent-CLI ticks (`agent = "claude-code"`, …), each
installed one in turn beside warm Strands ticks, alternating: one model call each, through
the tick's own governor; their CPU is the tick process's with the CLI and its hooks (the
fork server reaps the tick, whose usage holds the children it reaped).

    .venv/bin/python ops/bench/tick_bench.py [--ticks 20] [--concurrent 100] [--agent-ticks 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from machine import describe

from harness.config import LevelConfig, PathsConfig, Settings, StoreConfig
from harness.contracts.agents import AgentKind, missing_agent
from harness.devtools.fake_llm import FakeUpstream, Step, fake_upstream
from harness.execution.launchers import ColdLauncher, Launcher, TickProcess, WarmLauncher
from harness.execution.launchers.warm import ForkedTick
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.store import open_store

HELD_SECONDS = 600
"""How long the upstream holds the memory benchmark's calls (they are killed first)."""


class TimedLauncher(Launcher):
    """Another launcher, noting when each start began and the handle it gave."""

    def __init__(self, inner: Launcher) -> None:
        self.inner = inner
        self.started_at: dict[str, float] = {}
        self.handles: dict[str, TickProcess] = {}
        self.current = ""

    def _start(self, payload_json: bytes, log_path: Path, env: dict[str, str]) -> TickProcess:
        self.started_at[self.current] = time.time()
        handle = self.inner.start(payload_json, log_path, env)
        self.handles[self.current] = handle
        return handle

    def close(self) -> None:
        self.inner.close()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def median_ms(values: list[float]) -> str:
    return f"{1000 * statistics.median(values):7.0f} ms" if values else "    n/a"


def held_uss(
    preparer: Preparer, runner: Runner, launcher: Launcher, fake: FakeUpstream, count: int
) -> list[int]:
    """Start `count` ticks held in their model call; their USS once all are waiting."""
    handles, ticks = [], []
    for _ in range(count):
        prepared = preparer.prepare("min")
        fake.script(prepared.payload.tick_id, [Step(text="held", delay=HELD_SECONDS)])
        payload = prepared.payload.model_dump_json().encode()
        handles.append(launcher.start(payload, prepared.log_path, runner.env))
        ticks.append(prepared.payload.tick_id)
    deadline = time.monotonic() + 300
    while not all(tick in fake.state.first_request for tick in ticks):
        assert time.monotonic() < deadline, "not every held tick reached the upstream"
        time.sleep(0.2)
    uss = [psutil.Process(h.pid).memory_full_info().uss for h in handles]
    for handle in handles:
        handle.kill_group()
    for handle in handles:
        handle.wait(30)
    return uss


AGENT_LEVELS: dict[AgentKind, dict[str, str]] = {
    "claude-code": {"api": "anthropic"},
    "opencode": {"api": "openai-chat"},
}
"""Each agent CLI's level settings beside `agent` (the protocol its traffic speaks)."""


def agent_rows(root: Path, fake: FakeUpstream, warm: WarmLauncher, ticks: int) -> None:
    """Start latency and CPU of one-call agent-CLI ticks beside warm Strands ticks."""
    installed = [kind for kind in AGENT_LEVELS if missing_agent(kind, None) is None]
    levels = {"min": LevelConfig(every="1m", prompt="Say hi.", model="fake-model")}
    for kind in installed:
        levels[kind.replace("-", "_")] = LevelConfig(
            every="1m", prompt="Say hi.", model="fake-model", agent=kind, **AGENT_LEVELS[kind]
        )
    settings = Settings(
        store=StoreConfig(url=f"sqlite:///{root}/agents.db"),
        paths=PathsConfig(results=root / "agent-results", spool=root / "agent-spool"),
        levels=levels,
    )
    store = open_store(settings.store.url)
    env = {
        **os.environ,
        "OPENAI_BASE_URL": fake.url,
        "ANTHROPIC_BASE_URL": fake.base_url("anthropic"),
    }
    launcher = TimedLauncher(warm)
    preparer, runner = (
        Preparer(settings, store, env=env),
        Runner(settings, store, launcher, env=env),
    )
    assert warm.server_pid is not None
    latency: dict[str, list[float]] = {name: [] for name in levels}
    cpu: dict[str, list[float]] = {name: [] for name in levels}
    for _ in range(ticks):
        for name in levels:
            prepared = preparer.prepare(name)
            tick = launcher.current = prepared.payload.tick_id
            before_server = process_cpu(warm.server_pid)
            outcome = runner.run(prepared)
            assert outcome.status == "completed", outcome.reason
            latency[name].append(fake.state.first_request[tick] - launcher.started_at[tick])
            handle = launcher.handles[tick]
            assert isinstance(handle, ForkedTick) and handle.cpu_seconds is not None
            cpu[name].append(handle.cpu_seconds + process_cpu(warm.server_pid) - before_server)
    store.close()
    print(f"agent-CLI ticks: {ticks} each, alternating with warm Strands ticks, one call each")
    print("  kind          start latency p50 (spread)     CPU per tick p50")
    for name in levels:
        kind = "strands (warm)" if name == "min" else name.replace("_", "-")
        spread = f"{min(latency[name]) * 1000:.0f}-{max(latency[name]) * 1000:.0f} ms"
        print(f"  {kind:<14}{median_ms(latency[name])} ({spread:>13})   {median_ms(cpu[name])}")
    for kind in AGENT_LEVELS:
        if kind not in installed:
            print(f"  {kind}: not measured: {missing_agent(kind, None)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=20, help="ticks of each launcher")
    parser.add_argument("--concurrent", type=int, default=100, help="warm ticks held at once")
    parser.add_argument("--cold-concurrent", type=int, default=5, help="cold ticks held at once")
    parser.add_argument("--agent-ticks", type=int, default=5, help="ticks of each agent CLI")
    parser.add_argument("--agents-only", action="store_true", help="only the agent-CLI rows")
    args = parser.parse_args()
    print(describe())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as folder, fake_upstream() as fake:
        root = Path(folder)
        settings = Settings(
            store=StoreConfig(url=f"sqlite:///{root}/events.db"),
            paths=PathsConfig(results=root / "results", spool=root / "spool"),
            levels={"min": LevelConfig(every="1m", prompt="Say hi.", model="fake-model")},
        )
        store = open_store(settings.store.url)
        warm = WarmLauncher()
        assert warm.wait_ready(300), "the fork server did not warm up"
        assert warm.server_pid is not None
        if args.agent_ticks:
            agent_rows(root, fake, warm, args.agent_ticks)
        if args.agents_only:
            warm.close()
            return
        server_pid = warm.server_pid
        timed = {"cold": TimedLauncher(ColdLauncher()), "warm": TimedLauncher(warm)}
        env = {**os.environ, "OPENAI_BASE_URL": fake.url}
        preparer = Preparer(settings, store, env=env)
        runners = {
            kind: Runner(settings, store, launcher, env=env) for kind, launcher in timed.items()
        }
        latency: dict[str, list[float]] = {"cold": [], "warm": []}
        cpu: dict[str, list[float]] = {"cold": [], "warm": []}
        server_cpu = 0.0
        for _ in range(args.ticks):
            for kind in ("cold", "warm"):
                runner, launcher = runners[kind], timed[kind]
                prepared = preparer.prepare("min")
                tick = launcher.current = prepared.payload.tick_id
                before_children, before_server = children_cpu(), process_cpu(server_pid)
                outcome = runner.run(prepared)
                assert outcome.status == "completed", outcome.reason
                latency[kind].append(fake.state.first_request[tick] - launcher.started_at[tick])
                handle = launcher.handles[tick]
                if isinstance(handle, ForkedTick):
                    assert handle.cpu_seconds is not None
                    cpu[kind].append(handle.cpu_seconds)
                    server_cpu += process_cpu(server_pid) - before_server
                else:
                    assert kind == "cold", "a warm tick started cold: the server is not ready"
                    cpu[kind].append(children_cpu() - before_children)
        share = server_cpu / args.ticks
        server = psutil.Process(server_pid).memory_full_info()
        warm_uss = held_uss(preparer, runners["warm"], warm, fake, args.concurrent)
        cold_uss = held_uss(preparer, runners["cold"], ColdLauncher(), fake, args.cold_concurrent)
        store.close()
        warm.close()
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ratio = statistics.median(latency["cold"]) / statistics.median(latency["warm"])
    print(f"ticks: {args.ticks} cold and {args.ticks} warm, alternating, one model call each")
    print("  start latency, launcher start -> first upstream request (median)")
    print(f"    cold {median_ms(latency['cold'])}   warm {median_ms(latency['warm'])}   ", end="")
    print(f"cold/warm {ratio:.1f}x")
    for kind in ("cold", "warm"):
        spread = f"{min(latency[kind]) * 1000:.0f}-{max(latency[kind]) * 1000:.0f} ms"
        p90 = sorted(latency[kind])[int(0.9 * args.ticks)]
        print(f"    {kind} spread {spread}, p90 {p90 * 1000:.0f} ms")
    warm_cpu = [c + share for c in cpu["warm"]]
    print("  CPU per tick (median)")
    print(f"    cold {median_ms(cpu['cold'])}   warm {median_ms(warm_cpu)}", end="")
    print(f" (child {median_ms(cpu['warm']).strip()} + server share {1000 * share:.1f} ms)")
    print(
        f"  memory: fork server RSS {server.rss / 2**20:.0f} MiB, USS {server.uss / 2**20:.0f} MiB"
    )
    print(
        f"    USS per held warm tick: median {statistics.median(warm_uss) / 2**20:.1f} MiB "
        f"(max {max(warm_uss) / 2**20:.1f} MiB)"
    )
    total = sum(warm_uss) + server.rss
    print(
        f"    {args.concurrent} warm ticks at once: {sum(warm_uss) / 2**20:.0f} MiB of their own "
        f"+ {server.rss / 2**20:.0f} MiB server = {total / 2**30:.2f} GiB"
    )
    print(
        f"    USS per held cold tick: median {statistics.median(cold_uss) / 2**20:.1f} MiB "
        f"({args.cold_concurrent} held)"
    )


if __name__ == "__main__":
    main()
