"""A JSON level's answer: parsed, checked against the level's schema, or a content failure.

Models wrap JSON in prose or a Markdown fence more often than not, so the answer is
read as the predecessor call layer read it: the whole text, else the first fenced
block, else the span from the first opening bracket to the last closing one. What still
does not parse, or does not validate, fails the tick as `content`: the runner retries it
per the level's content retries. Without a schema the answer must be a JSON object, as
the predecessor expected: a bare number, string, boolean or `null` is JSON, but no
structured answer a reader of the value can use.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from jsonschema import ValidationError
from jsonschema.validators import validator_for

from harness.contracts import ResultError

_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_NOT_JSON = object()


def _candidates(text: str) -> list[str]:
    found = [text]
    fence = _FENCE.search(text)
    if fence:
        found.append(fence.group(1))
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    end = max(text.rfind("}"), text.rfind("]"))
    if starts and end > min(starts):
        found.append(text[min(starts) : end + 1])
    return found


def _parse(text: str) -> Any:
    for candidate in _candidates(text):
        try:
            return orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
    return _NOT_JSON


def structured(text: str, schema: dict[str, Any] | None) -> tuple[Any, ResultError | None]:
    """The answer's JSON value and None, or None and the content failure saying why."""
    value = _parse(text)
    if value is _NOT_JSON:
        excerpt = text[:200]
        return None, ResultError(
            type="InvalidJSON",
            message=f"the answer is not JSON: {excerpt!r}",
            failure_class="content",
        )
    if schema is None and not isinstance(value, dict):
        return None, ResultError(
            type="NotAnObject",
            message=f"the answer is JSON but not an object: {text[:200]!r}",
            failure_class="content",
        )
    if schema is not None:
        try:
            validator_for(schema)(schema).validate(value)
        except ValidationError as exc:
            where = "/".join(str(part) for part in exc.absolute_path) or "(top)"
            return None, ResultError(
                type="SchemaMismatch",
                message=f"the answer does not match the output schema at {where}: {exc.message}",
                failure_class="content",
            )
    return value, None
