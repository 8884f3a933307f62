"""A validation error in tickwork's words: the key's path, what is wrong, what was meant.

Pydantic's messages speak of inputs and value errors (`Extra inputs are not permitted`,
`Value error, …`); an operator edited a key in a TOML table. An unknown key names its
table and the nearest known key (`unknown key 'timeout_secods' in [levels.min]; did you
mean 'timeout_seconds'?`); every other message keeps its reason in plain words.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

PHRASES = (
    ("Value error, ", ""),
    ("Assertion failed, ", ""),
    ("Input should be ", "must be "),
    ("String should match pattern ", "must match the pattern "),
    ("String should have ", "must have "),
    ("List should have ", "must have "),
    ("Field required", "is required"),
)
"""Pydantic's phrasings and what tickwork says instead (its reasons stay as written)."""


def plain(message: str) -> str:
    """A pydantic message without pydantic's phrasing."""
    for phrase, words in PHRASES:
        message = message.replace(phrase, words)
    return message


def one_line(message: str, source: str) -> str:
    """An error of a file as a log line's reason: without its name, its lines joined by `;`.

    A ConfigError or CatalogError names the file first and lists one problem a line; in
    a service's log it becomes `<file> rejected (<one line>): …`, one line like the rest.
    """
    flat = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    return flat.removeprefix(f"{source}: ")


def describe(error: Any, model: type[BaseModel]) -> str:
    """One error of a validation of `model`, as `path: reason` in tickwork's words."""
    loc: Sequence[int | str] = error["loc"]
    if error["type"] == "extra_forbidden" and loc:
        return unknown_key(str(loc[-1]), loc[:-1], model)
    return f"{dotted(loc)}: {plain(error['msg'])}"


def dotted(loc: Sequence[int | str]) -> str:
    """A place in a file as its messages name it: `levels.min.every`, or `(top level)`."""
    return ".".join(str(part) for part in loc) or "(top level)"


def unknown_key(key: str, table: Sequence[int | str], model: type[BaseModel]) -> str:
    """`unknown key 'k' in [table]; did you mean 'known'?`, the hint only when one is close."""
    where = f"in [{'.'.join(str(part) for part in table)}]" if table else "at the top level"
    known = _keys_at(model, table)
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {key!r} {where}{hint}"


def _keys_at(model: type[BaseModel], table: Sequence[int | str]) -> list[str]:
    """The keys the table at `table` takes: its model's fields, followed from `model`."""
    kind: Any = model
    for part in table:
        kind = _step(kind, part)
        if kind is None:
            return []
    found = _model_in(kind)
    return [] if found is None else list(found.model_fields)


def _step(kind: Any, part: int | str) -> Any:
    """The type one path part leads to: a model's field, a table's or list's value."""
    model = _model_in(kind)
    if model is not None:
        field = model.model_fields.get(str(part))
        return None if field is None else field.annotation
    args = typing.get_args(_unwrapped(kind))
    origin = typing.get_origin(_unwrapped(kind))
    if origin is dict and len(args) == 2:
        return args[1]
    if origin is list and args:
        return args[0]
    return None


def _model_in(kind: Any) -> type[BaseModel] | None:
    """The model a field's type names: itself, or the one model of an optional or union."""
    kind = _unwrapped(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return kind
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        models = [m for arg in typing.get_args(kind) if (m := _model_in(arg)) is not None]
        return models[0] if len(models) == 1 else None
    return None


def _unwrapped(kind: Any) -> Any:
    """The type inside `Annotated[...]`."""
    while typing.get_origin(kind) is typing.Annotated:
        kind = typing.get_args(kind)[0]
    return kind
