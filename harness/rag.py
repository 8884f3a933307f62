"""Retrieval over an operator's folder of Markdown and text files: SQLite FTS5 with BM25.

Nothing is downloaded: the index is a SQLite file built by `tickwork rag index` and
queried read-only by ticks. Files are split into paragraph chunks of about 1,200
characters so an answer points at a passage, not a whole file.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

SUFFIXES = {".md", ".markdown", ".txt", ".rst"}
CHUNK_CHARS = 1200


@dataclass(frozen=True)
class Passage:
    """One retrieved excerpt and where it came from, as the `rag_lookup` tool returns it."""

    path: str
    text: str
    score: float


class RagError(Exception):
    """The index is missing, unreadable, or the query failed or timed out."""


def _chunks(text: str) -> list[str]:
    chunks: list[str] = []
    current = ""
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if current and len(current) + len(paragraph) > CHUNK_CHARS:
            chunks.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        chunks.append(current)
    return chunks


def build_index(folder: Path, index_path: Path) -> tuple[int, int]:
    """(Re)build the index from every text file under `folder`; returns (files, chunks)."""
    if not folder.is_dir():
        raise RagError(f"rag folder {folder} does not exist or is not a folder")
    index_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = index_path.with_suffix(".building")
    temporary.unlink(missing_ok=True)
    files = chunks = 0
    with sqlite3.connect(temporary) as conn:
        conn.execute("CREATE VIRTUAL TABLE passages USING fts5(path UNINDEXED, text)")
        for path in sorted(folder.rglob("*")):
            if path.suffix.lower() not in SUFFIXES or not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            rows = [(str(path.relative_to(folder)), chunk) for chunk in _chunks(text)]
            conn.executemany("INSERT INTO passages (path, text) VALUES (?, ?)", rows)
            files += 1
            chunks += len(rows)
    conn.close()
    temporary.replace(index_path)
    return files, chunks


def _match_expression(question: str) -> str:
    """FTS5 query from free text: its words OR-ed, quoted so no word is taken as syntax."""
    words = re.findall(r"\w+", question.lower())
    return " OR ".join(f'"{word}"' for word in words[:32])


def search(index_path: Path, question: str, k: int = 5, timeout: float = 20.0) -> list[Passage]:
    """The `k` best passages for a question, within `timeout`: a slow index cannot stall a tick."""
    if not index_path.is_file():
        raise RagError(f"no retrieval index at {index_path}: run `tickwork rag index`")
    expression = _match_expression(question)
    if not expression:
        return []
    deadline = time.monotonic() + timeout
    try:
        conn = sqlite3.connect(f"file:{index_path}?mode=ro", uri=True)
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        try:
            rows = conn.execute(
                "SELECT path, text, bm25(passages) FROM passages WHERE passages MATCH ? "
                "ORDER BY bm25(passages) LIMIT ?",
                (expression, min(k, 5)),
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode == sqlite3.SQLITE_INTERRUPT:
            raise RagError(f"retrieval timed out after {timeout:.0f} s") from exc
        raise RagError(f"retrieval failed: {exc}") from exc
    return [Passage(path, text, -score) for path, text, score in rows]
