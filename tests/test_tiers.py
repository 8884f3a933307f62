"""Capability tiers: one tier, the same tools for every agent kind, and nothing beyond it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from harness.config import ConfigError, load_settings
from harness.contracts import ToolCalled, TranscriptEntry
from harness.contracts.tiers import (
    CLAUDE_KNOWN,
    Capabilities,
    capabilities,
    claude_tool_args,
    opencode_permissions,
    strands_tools,
)
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from tests.tick_support import Harness, require_cli
from workers.tier_tools import (
    FolderSandbox,
    OutsideFolderError,
    make_file_read,
    tier_tools,
    web_fetch,
)


def test_can_shell_alone_means_full_and_nothing_set_means_none() -> None:
    assert capabilities(None, can_shell=True) == Capabilities("full")
    assert capabilities(None) == Capabilities("none")
    assert capabilities("read", web=True) == Capabilities("read", web=True)


def test_a_level_that_says_can_shell_and_a_smaller_tier_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "tickwork.toml"
    path.write_text('[levels.min]\nevery = "1m"\ncan_shell = true\ntools = "read"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert 'levels.min: can_shell = true means tools = "full"' in str(caught.value)
    path.write_text('[levels.min]\nevery = "1m"\ntools = "everything"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert "levels.min.tools: must be" in str(caught.value)


@pytest.mark.parametrize(
    ("tier", "web", "strands", "opencode", "claude"),
    [
        ("none", False, (), set(), ()),
        ("read", False, ("file_read",), {"read", "glob", "grep", "list"}, ("Read", "Glob", "Grep")),
        (
            "files",
            False,
            ("file_read", "file_editor"),
            {"read", "glob", "grep", "list", "edit"},
            ("Read", "Glob", "Grep", "Edit", "Write", "NotebookEdit"),
        ),
        (
            "full",
            True,
            ("file_editor", "shell", "web_fetch"),
            {"read", "glob", "grep", "list", "edit", "bash", "task", "external_directory"}
            | {"webfetch", "websearch"},
            (
                *("Read", "Glob", "Grep", "Edit", "Write", "NotebookEdit"),
                *("Bash", "Task", "TaskStop", "WebFetch", "WebSearch"),
            ),
        ),
    ],
)
def test_each_tier_maps_to_the_same_abilities_in_every_agent(
    tier: str, web: bool, strands: tuple[str, ...], opencode: set[str], claude: tuple[str, ...]
) -> None:
    caps = capabilities(tier, web=web)  # type: ignore[arg-type]
    assert strands_tools(caps) == strands
    permissions = opencode_permissions(caps)
    assert permissions["*"] == "deny", "whatever the tier does not name is denied"
    harmless = {"todowrite", "todoread", "doom_loop"}
    assert {k for k, v in permissions.items() if v == "allow"} - harmless == opencode
    args = claude_tool_args(caps)
    assert args.tools == claude == args.allowed
    assert set(args.disallowed) == set(CLAUDE_KNOWN) - set(claude)
    assert args.argv()[:2] == ["--tools", ",".join(claude)]


def test_web_tools_stay_off_unless_the_level_allows_them() -> None:
    for tier in ("none", "read", "files", "full"):
        caps = capabilities(tier)  # type: ignore[arg-type]
        assert "web_fetch" not in strands_tools(caps)
        assert opencode_permissions(caps).get("webfetch", "deny") == "deny"
        assert "WebFetch" in claude_tool_args(caps).disallowed


def test_the_read_tool_reads_inside_the_working_folder_and_nothing_outside(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "docs").mkdir(parents=True)
    (work / "docs" / "a.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "secret.txt").write_text("the operator's")
    os.symlink(tmp_path / "secret.txt", work / "link.txt")
    read = make_file_read(FolderSandbox(work, writable=False))
    assert read(path="docs/a.txt", start_line=2, end_line=3) == "2: two\n3: three"
    assert read(path=str(work / "docs")) == "a.txt"
    assert read(path=".") == "docs/\nlink.txt"
    for outside in ("../secret.txt", str(tmp_path / "secret.txt"), "link.txt"):
        with pytest.raises(OutsideFolderError):
            read(path=outside)


def test_the_read_tier_cannot_write_and_the_files_tier_writes_only_inside(tmp_path: Path) -> None:
    reading = FolderSandbox(tmp_path, writable=False)
    with pytest.raises(PermissionError):
        asyncio.run(reading.write_file("new.txt", b"x"))
    writing = FolderSandbox(tmp_path / "work", writable=True)
    asyncio.run(writing.write_file("new.txt", b"x"))
    assert (tmp_path / "work" / "new.txt").read_bytes() == b"x"
    with pytest.raises(OutsideFolderError):
        asyncio.run(writing.write_file("../escaped.txt", b"x"))
    assert not (tmp_path / "escaped.txt").exists()


def test_a_strands_tick_gets_the_tools_its_tier_names(tmp_path: Path) -> None:
    for tier in ("none", "read", "files", "full"):
        caps = capabilities(tier, web=tier == "full")  # type: ignore[arg-type]
        names = [tool.tool_name for tool in tier_tools(caps, tmp_path)]
        assert sorted(names) == sorted(strands_tools(caps))


def test_a_read_tier_strands_tick_reads_its_workdir_and_has_no_shell(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    (work / "notes.txt").write_text("the pager is quiet\n")
    harness = Harness(tmp_path, fake, rag=False, tools="read", workdir=work)
    marker = tmp_path / "touched"
    outcome = harness.tick(
        [
            Step(
                tool_calls=[
                    ToolCallSpec(name="file_read", arguments={"path": "notes.txt"}),
                    ToolCallSpec(name="shell", arguments={"command": f"touch {marker}"}),
                ]
            ),
            Step(text="The pager is quiet."),
        ]
    )
    assert outcome.status == "completed", outcome.reason
    assert not marker.exists()
    events = harness.events(outcome)
    traced = sorted((e.data["name"], e.data["status"]) for e in events if e.type == ToolCalled.type)
    assert traced == [("file_read", "ok"), ("shell", "error")]
    (read,) = [
        e.data
        for e in events
        if e.type == TranscriptEntry.type and e.data.get("tool") == "file_read"
    ]
    assert "1: the pager is quiet" in read["text"]


def test_a_read_tier_claude_code_tick_has_no_bash(tmp_path: Path, fake: FakeUpstream) -> None:
    require_cli("claude-code")
    work = tmp_path / "repo"
    work.mkdir()
    (work / "notes.txt").write_text("the pager is quiet\n")
    harness = Harness(
        tmp_path, fake, agent="claude-code", api="anthropic", rag=False, tools="read", workdir=work
    )
    marker = tmp_path / "touched"
    bash = ToolCallSpec(name="Bash", arguments={"command": f"touch {marker}", "description": "x"})
    read = ToolCallSpec(name="Read", arguments={"file_path": str(work / "notes.txt")})
    outcome = harness.tick([Step(tool_calls=[bash, read]), Step(text="The pager is quiet.")])
    assert outcome.status == "completed", outcome.reason
    assert not marker.exists()
    events = harness.events(outcome)
    traced = sorted((e.data["name"], e.data["status"]) for e in events if e.type == ToolCalled.type)
    assert traced == [("Bash", "error"), ("Read", "ok")]


def test_the_web_tool_fetches_a_pages_text_and_refuses_other_schemes(fake: FakeUpstream) -> None:
    page = web_fetch(url=f"{fake.url}/models")
    assert page.startswith("HTTP 200\n") and "fake-model" in page
    with pytest.raises(ValueError, match="only http and https"):
        web_fetch(url="file:///etc/passwd")
