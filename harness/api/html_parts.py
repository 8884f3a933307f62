"""The dashboard's HTML building blocks, shared by its panels' modules."""

from __future__ import annotations

from html import escape


def section(title: str, body: str, name: str = "") -> str:
    """A dashboard section: its title, its body, its anchor."""
    ident = f' id="{name}"' if name else ""
    return f"<section{ident}><h2>{escape(title)}</h2>{body}</section>"


def table(headers: tuple[str, ...], rows: list[str]) -> str:
    """A plain table of rows already rendered."""
    head = "".join(f"<th>{escape(name)}</th>" for name in headers)
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"
