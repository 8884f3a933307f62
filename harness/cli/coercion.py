"""Typer's coercion of a parameter, built when the parameter has a value to coerce.

Typer 0.29 coerces each parameter through a pydantic `TypeAdapter`, and builds it before
it looks at the value: an option left unset (`--config`, `--help` and the completion
options of the root) imports pydantic and builds a schema only to return None. That was
two fifths of a `tickwork status` the running service answers. An unset parameter
coerces to what Typer gives it (None, or `()` for one taking many values) without an
adapter here; the first value builds Typer's own coercion, which does the rest, but for
text, which is itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from typer._click import Command, Context, Parameter
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
from typer.core import TyperGroup, _TyperParameter

TEXT = (str, str | None)
"""Annotations whose coercion of a string is that string: pydantic's lax `str` returns it
as it is, so a tick id or a `--since` needs no adapter (nor pydantic imported) for it."""


@dataclass(frozen=True)
class _OnValue(RuntimeParam):
    """Typer's `RuntimeParam.coerce` answers an unset value itself; only a value gets here."""

    descriptor: TypeDescriptor

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
        if isinstance(value, str) and self.descriptor.annotation in TEXT:
            return value
        built = build_runtime_param(self.descriptor)
        param._runtime_param = built
        return built._coerce_value(value, param=param, ctx=ctx)


def coerce_on_value(command: Command) -> None:
    """Every Typer parameter of `command` and its subcommands builds its coercion late.

    Through `get_params`, the one way a command hands out its parameters: the `--help`
    option is made there, when the command's context exists.
    """
    command.get_params = _late(command.get_params)  # type: ignore[method-assign,assignment]
    if isinstance(command, TyperGroup):
        for subcommand in command.commands.values():
            coerce_on_value(subcommand)


def _late(get_params: Callable[[Context], list[Parameter]]) -> Callable[[Context], list[Parameter]]:
    def params_coerced_on_value(ctx: Context) -> list[Parameter]:
        params = get_params(ctx)
        for param in params:
            if isinstance(param, _TyperParameter) and param._runtime_param is None:
                descriptor = param.type_descriptor
                param._runtime_param = _OnValue(
                    parameter_info=descriptor.parameter_info,
                    annotation=descriptor.annotation,
                    descriptor=descriptor,
                )
        return params

    return params_coerced_on_value
