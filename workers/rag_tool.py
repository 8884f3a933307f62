"""`rag_lookup`: one retrieval per tick, k ≤ 5, bounded in time, never failing the tick."""

from __future__ import annotations

from typing import Any

from strands import tool

from harness.contracts import RagSettings
from harness.rag import RagError, search


def make_rag_lookup(settings: RagSettings) -> Any:
    """The tick's `rag_lookup` tool, over the operator's index, usable once per tick."""
    used = False

    @tool
    def rag_lookup(question: str) -> str:
        """Look up passages in the operator's knowledge folder. Allowed once per tick.

        Args:
            question: What to look for, in plain words.
        """
        nonlocal used
        if used:
            return "Limit reached: rag_lookup may run once per tick. Use what you found."
        used = True
        if settings.index_path is None:
            return "Retrieval is not configured for this level."
        try:
            passages = search(settings.index_path, question, settings.k, settings.timeout_seconds)
        except RagError as exc:
            return f"Retrieval unavailable ({exc}). Continue without it."
        if not passages:
            return "No passage matched."
        return "\n\n".join(f"[{p.path}]\n{p.text}" for p in passages)

    return rag_lookup
