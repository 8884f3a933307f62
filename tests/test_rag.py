"""Retrieval: a real FTS5 index over files; the tool answers once, and never fails a tick."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contracts.payload import RagSettings
from harness.rag import RagError, build_index, search
from workers.rag_tool import make_rag_lookup


@pytest.fixture
def index(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    (notes / "team").mkdir(parents=True)
    (notes / "oncall.md").write_text("# On call\n\nEscalate database alerts to Ana.\n\nPager.")
    (notes / "team" / "deploys.txt").write_text("Deploys freeze on Fridays after 15:00.")
    for i in range(8):
        (notes / f"alert{i}.md").write_text(f"Alert runbook {i}: database disk full, page Ana.")
    (notes / "image.png").write_bytes(b"\x89PNG not text")
    path = tmp_path / "rag.db"
    assert build_index(notes, path) == (10, 10)
    return path


def test_search_ranks_matching_passages_and_caps_k_at_5(index: Path) -> None:
    hits = search(index, "when do deploys freeze?", k=3)
    assert hits[0].path == "team/deploys.txt"
    assert len(search(index, "database Ana", k=50)) == 5
    assert search(index, "???") == []


def test_missing_index_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RagError, match="tickwork rag index"):
        search(tmp_path / "absent.db", "anything")


def test_the_tool_answers_once_then_says_the_limit_is_reached(index: Path) -> None:
    lookup = make_rag_lookup(RagSettings(enabled=True, index_path=index, k=2))
    first = lookup(question="database alerts")
    assert "Ana" in first and first.count("[") == 2
    assert "Limit reached" in lookup(question="deploys")


def test_the_tool_answers_with_text_when_the_index_is_missing(tmp_path: Path) -> None:
    lookup = make_rag_lookup(RagSettings(enabled=True, index_path=tmp_path / "none.db"))
    assert "Retrieval unavailable" in lookup(question="anything")


def test_a_search_past_its_timeout_is_reported_as_timed_out(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(300):
        (notes / f"alert{i}.md").write_text(f"Alert runbook {i}: database disk full, page Ana.")
    build_index(notes, tmp_path / "rag.db")
    with pytest.raises(RagError, match="timed out"):
        search(tmp_path / "rag.db", "database disk full Ana", timeout=0)
