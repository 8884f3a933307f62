"""Capability tiers: one tier, the same tools for every agent kind, and nothing beyond it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from harness.config import ConfigError, load_settings
from harness.contracts.payload import TickPayload
from harness.contracts.tiers import (
    CLAUDE_KNOWN,
    Capabilities,
    capabilities,
    claude_tool_args,
    opencode_permissions,
    strands_tools,
)
from harness.devtools.fake_llm import FakeUpstream
from workers.agents.claude_code import CONFINED, claude_settings
from workers.confinement import OutsideFolderError, escapes
from workers.tier_tools import FolderSandbox, make_file_read, tier_tools, web_fetch


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


def test_the_web_tool_fetches_a_pages_text_and_refuses_other_schemes(fake: FakeUpstream) -> None:
    page = web_fetch(url=f"{fake.url}/models")
    assert page.startswith("HTTP 200\n") and "fake-model" in page
    with pytest.raises(ValueError, match="only http and https"):
        web_fetch(url="file:///etc/passwd")


def test_the_cli_hooks_check_refuses_a_file_tool_call_that_leaves_the_workdir(
    tmp_path: Path,
) -> None:
    """What an agent CLI's `PreToolUse` hook asks of every call below the `full` tier."""
    work = tmp_path / "work"
    (work / "docs").mkdir(parents=True)
    os.symlink(tmp_path, work / "up")
    staying = [
        ("Read", {"file_path": str(work / "docs" / "a.txt")}),
        ("Read", {"file_path": "docs/a.txt"}),
        ("read", {"filePath": str(work / "docs" / "../a.txt")}),
        ("Write", {"file_path": "new.txt", "content": "x"}),
        ("Glob", {"pattern": "**/*.py"}),
        ("glob", {"pattern": "*.md", "path": str(work / "docs")}),
        ("Grep", {"pattern": "/etc/passwd", "path": "docs"}),  # a regular expression
        ("Grep", {"pattern": "pager"}),
    ]
    leaving = [
        ("Read", {"file_path": "/etc/passwd"}),
        ("Read", {"file_path": "../secret.txt"}),
        ("Read", {"file_path": "up/secret.txt"}),  # a symbolic link out
        ("read", {"filePath": str(tmp_path / "secret.txt")}),
        ("Write", {"file_path": str(tmp_path / "escaped.txt"), "content": "x"}),
        ("edit", {"filePath": "../escaped.txt", "oldString": "a", "newString": "b"}),
        ("NotebookEdit", {"notebook_path": "/tmp/n.ipynb", "new_source": ""}),
        ("Glob", {"pattern": "/etc/**"}),
        ("Glob", {"pattern": "../*/secret*"}),
        ("list", {"path": "/"}),
        ("Grep", {"pattern": "pager", "path": str(tmp_path)}),
    ]
    assert [escapes(tool, given, work) for tool, given in staying] == [None] * len(staying)
    for tool, given in leaving:
        refused = escapes(tool, given, work)
        assert refused is not None and "outside the tick's working folder" in refused, given


def test_claude_codes_own_rules_confine_every_tier_below_full() -> None:
    """The CLI's settings say it too: its own refusal does not depend on the hook's check."""
    for tier, confined in (("read", True), ("files", True), ("full", False)):
        payload = TickPayload(
            tick_id="min-1",
            level="min",
            prompt="go",
            model="m",
            max_tool_calls=2,
            tools=tier,
            result_path=Path("/nowhere/r.json"),
            store_url="sqlite://",
            spool_dir=Path("/nowhere"),
        )
        assert claude_settings(payload, "hook").get("permissions") == (
            CONFINED if confined else None
        )
