"""cli/param_values.py converts option values as typer's pydantic adapters do, for every option of every verb.

The plain conversion must be invisible: the same value for everything it converts, and typer's
own conversion (the same value, or the same error) for everything else. Checked here against
typer's adapter (`typer._coercion.build_runtime_param`) with values of every kind an option meets.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer._click import Context
from typer._coercion import build_runtime_param
from typer.core import _TyperParameter

from cli.main import VERBS, app
from cli.param_values import install

SAMPLES = ["", "0", "1", "7", "-3", "64", "65", "007", "+5", " 5", "1_0", "9" * 25, "x", "true", "no", "utf8", "HEX",
           "read_committed", "READ_UNCOMMITTED", "json", "Table", "a b", "\u00fc"]  # fmt: skip
NATIVE = [0, 1, -1, 10**20, True, False, 1.5, ["a", "b"], ("x", "1"), []]


def _leaves(command: Any, path: str = "") -> list[tuple[str, Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        return [(path, command)]
    return [leaf for name in list(subcommands) for leaf in _leaves(subcommands[name], f"{path} {name}".strip())]


def _params() -> list[tuple[str, Any, Any]]:
    root = typer.main.get_command(app)
    out = []
    for path, command in [("", root), *_leaves(root)]:
        install(command)
        ctx = Context(command, info_name=path or "txlog")
        out.extend((f"{path} {p.name}", p, ctx) for p in command.get_params(ctx) if isinstance(p, _TyperParameter))
    return out


def _outcome(convert: Any, value: Any, param: Any, ctx: Context) -> tuple[str, Any]:
    try:
        return "value", convert(value, param=param, ctx=ctx)
    except Exception as exc:  # noqa: BLE001 - the error itself is what must agree
        return type(exc).__name__, str(exc)


PARAMS = _params()


def test_every_verb_is_covered():
    assert {name.split()[0] for name, _, _ in PARAMS if name.split()[0] in VERBS} == set(VERBS)


@pytest.mark.parametrize(("name", "param", "ctx"), PARAMS, ids=[name for name, _, _ in PARAMS])
def test_plain_conversion_agrees_with_typers(name, param, ctx):
    plain = param.get_runtime_param()
    assert type(plain).__name__ == "_PlainRuntimeParam", name
    typers = build_runtime_param(param.type_descriptor)
    for value in [*SAMPLES, *NATIVE, param.default]:
        got = _outcome(plain._coerce_value, value, param, ctx)
        want = _outcome(typers._coerce_value, value, param, ctx)
        assert got == want and type(got[1]) is type(want[1]), (name, value)
