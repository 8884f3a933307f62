"""The warm launcher keeps every isolation a cold start gives, and survives its server.

Real fork servers, real forked processes and signals. Most ticks run the stand-in worker
(`tests/standin_worker.py`), whose prompt says how to misbehave; the tick killed in the
middle of a model call runs the real worker against the fake upstream.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.config import LevelConfig, PathsConfig, RoutingConfig, Settings, StoreConfig
from harness.contracts.payload import TickPayload
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.execution.launchers import (
    ColdLauncher,
    TickProcess,
    WarmLauncher,
    preloads_of,
)
from harness.execution.launchers.warm import ForkedTick, server_environment
from harness.routing import parse_catalog
from tests.catalog_support import valid
from tests.tick_support import Harness, live_in_group, ready_launcher
from tests.waiting import wait_until

STANDIN = "tests.standin_worker"


@pytest.fixture
def launcher() -> Iterator[WarmLauncher]:
    """A launcher of its own, for the tests that break its server."""
    launcher = WarmLauncher(STANDIN)
    assert launcher.wait_ready(60)
    yield launcher
    launcher.close()


def start(
    launcher: WarmLauncher, folder: Path, command: str, env: dict[str, str] | None = None
) -> tuple[TickProcess, Path]:
    """Start a stand-in tick named after its command; returns it and its result path."""
    name = f"{command}-{time.monotonic_ns()}"
    payload = TickPayload(
        tick_id=name,
        level="min",
        prompt=command,
        model="stand-in",
        max_tool_calls=0,
        result_path=folder / f"{name}.json",
        store_url=f"sqlite:///{folder}/events.db",
        spool_dir=folder / "spool",
    )
    process = launcher.start(
        payload.model_dump_json().encode(), folder / f"{name}.log", env or {"TICK": name}
    )
    return process, payload.result_path


def wait_for(path: Path) -> dict[str, Any]:
    wait_until(path.exists, f"{path} to appear", interval=0.02)
    report: dict[str, Any] = json.loads(path.read_text())
    return report


def ends(pid: int, timeout: float = 30) -> bool:
    """Whether the process exits within `timeout` (a zombie has exited)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def server_sees(pid: int) -> tuple[bytes, list[str]]:
    """The server's environment block and the paths of its open descriptors."""
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    return environ, [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]


def test_a_tick_sees_only_its_own_environment_and_descriptors(
    standin_launcher: WarmLauncher, tmp_path: Path
) -> None:
    launcher = standin_launcher
    env_a = {"TICK": "a", "OPENAI_API_KEY": "sk-secret-of-tick-a"}
    env_b = {"TICK": "b", "OPENAI_API_KEY": "sk-secret-of-tick-b"}
    holder, held = start(launcher, tmp_path, "hold", env_a)
    seen_a = wait_for(held)
    second, result = start(launcher, tmp_path, "report", env_b)
    assert second.wait(30) == 0
    seen_b = wait_for(result)

    assert isinstance(holder, ForkedTick) and isinstance(second, ForkedTick)
    assert seen_a["env"] == env_a and seen_b["env"] == env_b
    for seen, process in ((seen_a, holder), (seen_b, second)):
        assert seen["pid"] == seen["pgid"] == seen["sid"] == process.pid
        assert seen["sigterm_default"]
    assert set(seen_b["fds"]) <= {"0", "1", "2", "3"}, seen_b["fds"]
    assert seen_b["fds"]["1"] == seen_b["fds"]["2"] == str(result.with_suffix(".log"))
    assert not any("hold-" in target for target in seen_b["fds"].values())
    assert seen_a["random"] != seen_b["random"]

    assert launcher.server_pid is not None
    environ, descriptors = server_sees(launcher.server_pid)
    assert b"sk-secret-of-tick" not in environ
    assert not any(str(tmp_path) in target for target in descriptors), descriptors
    held.with_suffix(".go").touch()
    assert holder.wait(30) == 0


@pytest.mark.parametrize(
    ("command", "exit_code"), [("raise", 1), ("abort", -signal.SIGABRT), ("leak", 0), ("exit", 3)]
)
def test_a_crash_abort_leak_or_exit_disturbs_neither_the_server_nor_other_ticks(
    standin_launcher: WarmLauncher, tmp_path: Path, command: str, exit_code: int
) -> None:
    launcher = standin_launcher
    other, other_result = start(launcher, tmp_path, "hold")
    wait_for(other_result)
    server = psutil.Process(launcher.server_pid)
    rss_before = server.memory_info().rss

    failing, _ = start(launcher, tmp_path, command)
    assert isinstance(failing, ForkedTick)
    assert failing.wait(60) == exit_code
    assert live_in_group(failing.pid) == []
    if command == "raise":
        log = next(tmp_path.glob("raise-*.log")).read_text()
        assert "RuntimeError: the stand-in crashed" in log

    assert launcher.server_pid == server.pid and server.is_running()
    assert server.memory_info().rss < rss_before + (20 << 20)
    assert other.alive()
    other_result.with_suffix(".go").touch()
    assert other.wait(30) == 0
    after, result = start(launcher, tmp_path, "report")
    assert isinstance(after, ForkedTick) and after.wait(30) == 0
    assert wait_for(result)["pid"] == after.pid and launcher.server_pid == server.pid


def test_a_tick_killed_in_the_middle_of_a_model_call_leaves_the_server_serving(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    assert isinstance(harness.runner.launcher, WarmLauncher)
    assert harness.runner.launcher.wait_ready(120)
    doomed = harness.preparer.prepare("min", timeout=60)
    fake.script(doomed.payload.tick_id, [Step(text="never sent", delay=60)])
    process = harness.runner.launcher.start(
        doomed.payload.model_dump_json().encode(), doomed.log_path, harness.runner.env
    )
    # As a runner does at the launch: the worker's first record waits for it (5 s at most).
    harness.runner.record(doomed.started(process.pid))
    server = harness.runner.launcher.server_pid
    wait_until(
        lambda: doomed.payload.tick_id in fake.state.first_request,
        "the tick to reach the upstream",
        interval=0.02,
    )
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(10) == -signal.SIGKILL

    outcome = harness.tick([Step(text="Still serving.")])
    assert outcome.status == "completed", outcome.reason
    assert harness.runner.launcher.server_pid == server


def test_the_real_warm_up_leaves_no_thread_connection_or_file_to_fork() -> None:
    launcher = ready_launcher()  # the shared one, as every test's: never warmed twice
    assert launcher.server_pid is not None
    server = psutil.Process(launcher.server_pid)
    assert server.num_threads() == 1
    assert server.net_connections(kind="inet") == [], "a socket would cross the fork"
    assert server.open_files() == [], "a store or log file would cross the fork"
    assert "workers.llm_worker" in server.cmdline(), "reconcile recognises workers by it"


def test_the_levels_protocols_agent_clis_and_tools_are_what_a_server_preloads(
    tmp_path: Path,
) -> None:
    levels = {
        "chat": LevelConfig(every="1m", prompt="p", model="m"),
        "editor": LevelConfig(
            every="1m", prompt="p", model="m", api="anthropic", tools="files", web=True
        ),
        "claude": LevelConfig(
            every="1m", prompt="p", model="m", api="anthropic", agent="claude-code"
        ),
    }
    settings = Settings(
        store=StoreConfig(url=f"sqlite:///{tmp_path}/events.db"),
        paths=PathsConfig(results=tmp_path / "results", spool=tmp_path / "spool"),
        levels=levels,
    )
    assert preloads_of(settings) == {
        "openai-chat",
        "anthropic",
        "file_read",
        "file_editor",
        "web_fetch",
        "claude-code",
    }
    catalog = tmp_path / "catalog.toml"
    routed = settings.model_copy(update={"routing": RoutingConfig(catalog=catalog)})
    assert {"ollama", "openai-responses", "opencode"} <= preloads_of(routed)
    document = valid()
    cli = {"model": "m", "execution_class": "cloud", "base_url_env": "CLI_URL", "agent": "opencode"}
    document["targets"]["cli"] = cli
    document["targets"]["local"]["api"] = "ollama"
    in_force = parse_catalog(document)
    assert preloads_of(routed, in_force) == preloads_of(settings) | {"ollama", "opencode"}
    on_postgresql = settings.model_copy(
        update={"store": StoreConfig(url="postgresql://tickwork@db.example/tickwork")}
    )
    assert preloads_of(on_postgresql) == preloads_of(settings) | {"postgresql"}


def test_a_server_lacking_what_a_service_now_needs_is_replaced_by_one_preloading_it(
    tmp_path: Path,
) -> None:
    launcher = WarmLauncher(STANDIN, preloads={"openai-chat"})
    try:
        assert launcher.wait_ready(60)
        first = launcher.server_pid
        process, result = start(launcher, tmp_path, "report")
        assert process.wait(30) == 0
        assert wait_for(result)["preloads"] == ["openai-chat"]
        launcher.preload({"openai-chat"})
        assert launcher.server_pid == first, "nothing new to preload: the server serves on"
        launcher.preload({"anthropic"})
        assert launcher.server_pid != first
        assert launcher.wait_ready(60)
        process, result = start(launcher, tmp_path, "report")
        assert process.wait(30) == 0
        assert wait_for(result)["preloads"] == ["anthropic", "openai-chat"]
        assert ends(first), "the replaced server exits: it had no tick left"
    finally:
        launcher.close()


def test_the_real_warm_up_imports_only_the_sdks_and_tools_it_is_asked_for() -> None:
    """A PostgreSQL store's driver is among them: every tick of such a service imported it.

    The configuration's models are not (pydantic-settings, the schedules' triggers): a tick
    reads its payload, never a configuration. Nor is the MCP SDK, which Strands' package of
    vended tools imports for its MCP router beside the shell and editor a tick uses; that
    package still imports whole afterwards, with the shell the tick loaded.
    """
    probe = (
        "import sys, workers.llm_worker as w; "
        "w.warm_up(frozenset({'anthropic', 'postgresql', 'shell', 'file_editor'})); "
        "print(*sorted(m for m in ('anthropic', 'openai', 'ollama', 'mcp', 'psycopg', "
        "'pydantic_settings', 'apscheduler') if m in sys.modules)); "
        "loaded = sys.modules['strands.vended_tools.shell'].shell; "
        "from strands.vended_tools import make_mcp_router, shell; print(shell is loaded)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["anthropic", "psycopg", "True"]


def warm_again(launcher: WarmLauncher, folder: Path, old_server: int | None) -> ForkedTick:
    """Start ticks until one is forked by a server other than `old_server`."""
    deadline = time.monotonic() + 60
    while True:
        process, _ = start(launcher, folder, "report")
        assert process.wait(30) == 0
        if isinstance(process, ForkedTick) and launcher.server_pid != old_server:
            return process
        assert time.monotonic() < deadline, "no new fork server took over"


@pytest.mark.long
@pytest.mark.parametrize("failure", ["dies", "hangs"])
def test_a_dead_or_hung_server_is_replaced_and_ticks_start_cold_meanwhile(
    launcher: WarmLauncher, tmp_path: Path, failure: str
) -> None:
    launcher.fork_timeout = 1.0
    first, _ = start(launcher, tmp_path, "report")
    assert isinstance(first, ForkedTick) and first.wait(30) == 0
    old = launcher.server_pid
    assert old is not None
    os.kill(old, signal.SIGKILL if failure == "dies" else signal.SIGSTOP)

    meanwhile, result = start(launcher, tmp_path, "report")
    assert not isinstance(meanwhile, ForkedTick), "a tick was handed to a broken server"
    assert meanwhile.wait(30) == 0 and wait_for(result)["pid"] == meanwhile.pid
    warm_again(launcher, tmp_path, old)
    assert ends(old, timeout=0)


def test_a_tick_outlives_the_server_that_forked_it(launcher: WarmLauncher, tmp_path: Path) -> None:
    holder, held = start(launcher, tmp_path, "hold")
    wait_for(held)
    assert launcher.server_pid is not None
    os.kill(launcher.server_pid, signal.SIGKILL)
    assert holder.wait(0.2) is None and holder.alive()
    held.with_suffix(".go").touch()
    assert holder.wait(30) == -1  # watched like an adopted process: the code is unknown
    assert not holder.alive()


def test_new_code_replaces_the_server_after_its_ticks_end(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "module.py").write_text("")
    launcher = WarmLauncher(STANDIN, watched=[source])
    launcher.stamp_interval = 0
    try:
        assert launcher.wait_ready(60)
        holder, held = start(launcher, tmp_path, "hold")
        wait_for(held)
        old = launcher.server_pid
        assert old is not None
        later = time.time() + 10
        os.utime(source / "module.py", (later, later))
        warm_again(launcher, tmp_path, old)
        assert psutil.Process(old).is_running(), "the old server left before its tick ended"
        held.with_suffix(".go").touch()
        assert holder.wait(30) == 0
        assert ends(old), "the retired server did not exit once its tick ended"
    finally:
        launcher.close()


def test_a_server_that_cannot_warm_up_leaves_ticks_cold(tmp_path: Path) -> None:
    launcher = WarmLauncher("tests.no_such_worker")
    assert not launcher.wait_ready(60)
    assert launcher.server_pid is None, "a failed warm-up is retried only after a pause"
    process, _ = start(launcher, tmp_path, "report")
    assert not isinstance(process, ForkedTick) and launcher.server_pid is None
    assert process.wait(30) == 1, "the cold start of a missing module fails as it should"


def test_the_server_keeps_the_ca_variables_so_its_warm_up_loads_the_ticks_tls_context() -> None:
    service = {
        "PATH": "/usr/bin",
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        "SSL_CERT_DIR": "/etc/ssl/certs",
        "OPENAI_API_KEY": "sk-secret",
    }
    server = server_environment(service)
    assert server == {k: service[k] for k in ("PATH", "SSL_CERT_FILE", "SSL_CERT_DIR")}


def test_a_warming_server_says_so_until_it_is_ready_and_a_failed_one_does_not(
    tmp_path: Path,
) -> None:
    """The runner holds a tick while `warming()`: true only while a warm-up may still end well."""
    launcher = WarmLauncher(STANDIN)
    try:
        assert launcher.warming(), "a server just spawned is warming"
        assert launcher.wait_ready(60) and not launcher.warming()
        process, _ = start(launcher, tmp_path, "report")
        assert isinstance(process, ForkedTick) and process.wait(30) == 0
    finally:
        launcher.close()
    failing = WarmLauncher("tests.no_such_worker")
    try:
        assert not failing.wait_ready(60) and not failing.warming()
    finally:
        failing.close()
    assert not ColdLauncher().warming() and ColdLauncher().wait_ready(0)
