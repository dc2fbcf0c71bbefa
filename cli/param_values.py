"""Option values converted without pydantic where the conversion is plain, so a run does not import it.

typer converts every parameter's value (a default included) through a pydantic TypeAdapter
built on first use (typer/_coercion.py `build_runtime_param`); importing pydantic and building
the adapters cost about 65 ms of every `txlog VERB` run, more than the interpreter's own start.
The CLI's options are strings, booleans, integers (some with a minimum or maximum), choices
(enums and literals) and lists of strings, so most values convert in one line of Python:

* a str stays itself, a bool stays itself;
* an int, or a plain decimal string (no sign but '-', no leading zeros, no '_'), within the
  option's bounds, is that int;
* a choice is typer's own `coerce_cli_choice`, which is all its adapter calls;
* a list converts item by item.

Anything else (a value pydantic may accept in another spelling, or must reject) goes to typer's
own adapter, unchanged: every error message, and everything pydantic accepts, stays typer's.
`install` puts this conversion on a command's parameters before they are first used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

try:  # typer's conversion internals (typer >= 0.24); without them every value keeps typer's path
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_choice
    from typer.core import _TyperParameter
except ImportError:  # pragma: no cover - an older typer converts with its own (click) types
    RuntimeParam = None  # type: ignore[assignment,misc]

if TYPE_CHECKING:
    from typer._click import Command, Context, Parameter

#: A decimal integer every int conversion reads the same way (at most 18 digits: no digit limit applies).
_PLAIN_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")


class _Unsure:
    """The leaf conversion's answer for a value it leaves to typer's adapter."""


_UNSURE = _Unsure()


def _plain_leaf(descriptor: TypeDescriptor, value: Any, ctx: Context) -> Any:
    """`value` converted as typer's adapter for one item of `descriptor` would, or _UNSURE."""
    annotation, info = descriptor.annotation, descriptor.parameter_info
    if descriptor.is_list:
        (annotation,) = annotation.__args__
    if info.parser is not None:
        return _UNSURE
    if annotation is str:
        return value if type(value) is str else _UNSURE
    if annotation is bool:
        return value if type(value) is bool else _UNSURE
    if annotation is int:
        return _plain_int(value, info.min, info.max) if not info.clamp else _UNSURE
    if descriptor.choices is not None:
        try:
            return coerce_cli_choice(value, choices=descriptor.choices, case_sensitive=info.case_sensitive, ctx=ctx)
        except ValueError:
            return _UNSURE  # typer's adapter raises its own error for it
    return _UNSURE


def _plain_int(value: Any, low: float | None, high: float | None) -> Any:
    if type(value) is str and _PLAIN_INT.fullmatch(value):
        value = int(value)
    if type(value) is not int or (low is not None and value < low) or (high is not None and value > high):
        return _UNSURE
    return value


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class _PlainRuntimeParam(RuntimeParam):
        """typer's conversion of one parameter, with plain values converted here and the rest by typer."""

        descriptor: TypeDescriptor

        def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
            if self.descriptor.is_list:
                items = value if isinstance(value, (list, tuple)) else [value]
                converted = [_plain_leaf(self.descriptor, item, ctx) for item in items]
                if not any(item is _UNSURE for item in converted):
                    return converted
            elif not self.descriptor.is_tuple:
                result = _plain_leaf(self.descriptor, value, ctx)
                if result is not _UNSURE:
                    return result
            return build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)


def install(command: Command) -> None:
    """Give every typer parameter of `command` (and of its subcommands) the plain conversion.

    Done as click lists the parameters for parsing (`get_params`), so the ones typer adds after
    building the command (the help option, the completion options) are covered too.
    """
    if RuntimeParam is None:
        return
    listed = command.get_params

    def get_params(ctx: Context) -> list[Parameter]:
        params = listed(ctx)
        for param in params:
            _convert_plainly(param)
        return params

    command.get_params = get_params  # type: ignore[method-assign]
    for sub in getattr(command, "commands", {}).values():
        install(sub)


def _convert_plainly(param: Parameter) -> None:
    if isinstance(param, _TyperParameter) and param._runtime_param is None:
        descriptor = param.type_descriptor
        if descriptor.file_annotation is None:
            param._runtime_param = _PlainRuntimeParam(
                parameter_info=descriptor.parameter_info, annotation=descriptor.annotation, descriptor=descriptor
            )
