"""Structured output: the JSON Schema a level's answers must meet, read and checked once.

The schema is a file the operator owns. It is checked when the configuration loads (a
schema that is no JSON, or no valid JSON Schema, stops the load naming the file) and
read again for each tick's payload, so an edit applies to the next tick as a prompt
file's does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


class OutputSchemaError(ValueError):
    """The output schema file cannot be used; the message names the file and why."""


def load_output_schema(path: Path) -> dict[str, Any]:
    """The schema in `path`, checked against its own meta-schema.

    jsonschema is imported here, not with the module: the configuration imports this
    module, and loading jsonschema's meta-schemas costs every command (`status` too) about
    a tenth of a second even when no level has an output schema.
    """
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise OutputSchemaError(f"output schema {path}: {exc.strerror}") from None
    try:
        schema = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise OutputSchemaError(f"output schema {path} is not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise OutputSchemaError(f"output schema {path} must be a JSON object")
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(part) for part in exc.path) or "(top)"
        raise OutputSchemaError(
            f"output schema {path} is not a valid JSON Schema at {where}: {exc.message}"
        ) from None
    return schema
