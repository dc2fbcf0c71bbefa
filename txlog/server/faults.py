"""Fault rehearsal: `txlog serve --fault API:ERROR[:COUNT]` answers requests with a Kafka error.

An application's error handling is the part of exactly-once code that real brokers exercise
least: a coordinator moving, a request timing out, an unknown server error. A fault makes the
server answer the next COUNT requests of one API with one error instead of serving them, so a
client's retry and recovery paths run on demand. A faulted request never reaches its handler
and so never touches the store: the error is the whole answer, as from a broker that refused
the request before doing anything.

The answer is a well-formed response of the request's version, built generically from the
request (Kafka's equivalent is each request's `getErrorResponse`): the error goes in the
response's top-level error code when it has one; otherwise every item the request named
(each topic, partition, group, transactional id...) is answered with the error in the
shallowest error-code field its response item has. Other fields take the spec's defaults.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
import types
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from txlog.server import wire

_ERROR_CODE = "error_code"
_FAULT_MESSAGE = "injected by txlog serve --fault"

# The same item is named differently in requests and responses (Fetch's `partition` is its
# response's `partition_index`, Produce's partition `index`...): fields compare by these stems.
_SAME_ITEM = {
    "index": "partition",
    "partition_index": "partition",
    "partition": "partition",
    "name": "topic",
    "topic_name": "topic",
    "topic": "topic",
}


@dataclass(slots=True)
class Fault:
    """Answer the next `remaining` requests of `api_key` with `error`."""

    api_key: int
    error: ErrorCode
    remaining: int

    def __str__(self) -> str:
        return f"{wire.api_name(self.api_key)}:{self.error.name.upper()}:{self.remaining}"


def parse_fault(text: str) -> Fault:
    """`API:ERROR[:COUNT]` (API and ERROR case-insensitive, by Kafka's names); ValueError says what is wrong."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"'{text}' is not API:ERROR[:COUNT]")
    api_key = api_key_by_name(parts[0])
    error = error_by_name(parts[1])
    count = 1
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) < 1:
            raise ValueError(f"'{text}': COUNT must be a positive whole number, not '{parts[2]}'")
        count = int(parts[2])
    return Fault(api_key, error, count)


def read_fault_file(path: str) -> list[Fault]:
    """The faults a file lists, one `API:ERROR[:COUNT]` a line (blank lines and `#` comments skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    found = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if text:
            try:
                found.append(parse_fault(text))
            except ValueError as exc:
                raise ValueError(f"{path} line {number}: {exc}") from None
    return found


def api_key_by_name(name: str) -> int:
    """The key of an API named as Kafka does (`EndTxn`, `endtxn`, `end_txn`)."""
    wanted = name.replace("_", "").lower()
    for key, snake in api_key_map.items():
        if snake.replace("_", "") == wanted:
            return key
    raise ValueError(f"unknown API '{name}' (Kafka's API names, e.g. Produce, EndTxn, FindCoordinator)")


def error_by_name(name: str) -> ErrorCode:
    """Kafka's error of that name (`COORDINATOR_NOT_AVAILABLE`, any case); NONE is not a fault."""
    member = ErrorCode.__members__.get(name.lower())
    if member is None or member == ErrorCode.none:
        raise ValueError(f"unknown Kafka error '{name}' (e.g. COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)")
    return member


class Faults:
    """The faults still to inject, taken one request at a time (thread-safe: replaced at runtime)."""

    def __init__(self, faults: Iterable[Fault] = ()):
        self._lock = threading.Lock()
        self._faults: list[Fault] = list(faults)

    def take(self, api_key: int) -> ErrorCode | None:
        """The error to answer this request of `api_key` with, or None to serve it; counts it down."""
        with self._lock:
            for fault in self._faults:
                if fault.api_key == api_key:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault.error
        return None

    def replace(self, faults: Iterable[Fault]) -> None:
        with self._lock:
            self._faults = list(faults)

    def pending(self) -> list[Fault]:
        with self._lock:
            return [dataclasses.replace(f) for f in self._faults]


# ---- the error response ------------------------------------------------------------------------------


def error_response(message: wire.MessageTypes, request: Any, error: ErrorCode) -> Any:
    """A response of the request's version answering every item of `request` with `error`."""
    return _answer(message.response, request, error)


def _answer(cls: type, request: Any, error: ErrorCode) -> Any:
    """An instance of response type `cls` for request item `request` (a struct, a primitive, or None)."""
    fields = dataclasses.fields(cls)
    errored = any(_is_error_code(f) for f in fields)
    values: dict[str, Any] = {}
    for f in fields:
        if _is_error_code(f):
            values[f.name] = error
        elif f.name == "error_message" and errored:
            values[f.name] = f"{error.name.upper()} {_FAULT_MESSAGE}"
        elif (copied := _copied(f, request)) is not _ABSENT:
            values[f.name] = copied
        elif _is_array(f) and not errored and _is_struct(_element(f)):
            values[f.name] = tuple(_answer(_element(f), item, error) for item in _matching_items(f, request))
        elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue  # the spec's default
        else:
            values[f.name] = _empty(f)
    return cls(**values)


_ABSENT = object()


def _copied(f: dataclasses.Field, request: Any) -> Any:
    """The request's value of the field naming the same thing as response field `f`, if any."""
    if request is None or _is_array(f) or _is_struct(f.type):
        return _ABSENT
    if isinstance(request, _Bare):  # a bare request item (a partition index, a group id...)
        return request.value if request.field == f.name else _ABSENT
    stem = _stem(f.name)
    for g in dataclasses.fields(request):
        if _stem(g.name) == stem and not _is_array(g) and not _is_struct(g.type):
            return getattr(request, g.name)
    return _ABSENT


@dataclass(frozen=True, slots=True)
class _Bare:
    """An item of a request array of plain values, and the response field that value fills."""

    field: str
    value: Any


def _matching_items(f: dataclasses.Field, request: Any) -> list[Any]:
    """The request's items that response array `f` answers one by one (empty when none correspond).

    A response array answers the request array whose struct shares the most item-naming fields
    with its own (topic with topic, partition with partition, resource with resource); a request
    array of bare values (`partition_indexes`, `transactional_ids`, `coordinator_keys`, `groups`)
    fills the response field its singular names (`partition_index`, `transactional_id`, `key`,
    `group_id`).
    """
    if request is None or not dataclasses.is_dataclass(request):
        return []
    element = _element(f)
    names = {_stem(g.name) for g in dataclasses.fields(element)}
    best: tuple[int, list[Any]] = (0, [])
    struct_arrays = []
    for g in dataclasses.fields(request):
        if not _is_array(g):
            continue
        items = getattr(request, g.name) or ()
        if _is_struct(_element(g)):
            struct_arrays.append(list(items))
            score = len(names & {_stem(h.name) for h in dataclasses.fields(_element(g))})
            if score > best[0]:
                best = (score, list(items))
        elif (target := _singular_field(g.name, element)) is not None and best[0] == 0:
            best = (1, [_Bare(target, value) for value in items])
    if best[0] == 0 and len(struct_arrays) == 1 and not _identity_fields(element):
        return struct_arrays[0]  # results that answer their requests by position (CreateAcls' creations)
    return best[1]


def _identity_fields(element: type) -> list[str]:
    """The fields of a response item that could name what it answers (all but errors and arrays)."""
    return [
        g.name
        for g in dataclasses.fields(element)
        if not (_is_error_code(g) or _is_array(g) or g.name == "error_message")
    ]


def _singular_field(array_name: str, element: type) -> str | None:
    """The field of `element` a request array named `array_name` lists values of, if one is named so."""
    singular = "_".join(_singular(word) for word in array_name.split("_"))
    candidates = [g.name for g in dataclasses.fields(element) if not (_is_array(g) or _is_error_code(g))]
    for name in candidates:
        if name == singular or singular.endswith("_" + name) or name.startswith(singular + "_"):
            return name
    for name in candidates:  # `groups_names` lists the values of `group_id`
        if name.split("_")[0] == singular.split("_")[0]:
            return name
    return None


def _singular(word: str) -> str:
    if word.endswith("xes"):
        return word[:-2]  # indexes
    return word[:-1] if word.endswith("s") else word


def _stem(name: str) -> str:
    return _SAME_ITEM.get(name, name)


def _is_error_code(f: dataclasses.Field) -> bool:
    return f.metadata.get("kafka_type") == _ERROR_CODE


def _is_array(f: dataclasses.Field) -> bool:
    return get_origin(_unoptional(f.type)) is tuple


def _element(f: dataclasses.Field) -> Any:
    return get_args(_unoptional(f.type))[0]


def _is_struct(t: Any) -> bool:
    return isinstance(t, type) and dataclasses.is_dataclass(t)


def _unoptional(t: Any) -> Any:
    """`X | None` -> X."""
    if get_origin(t) in (types.UnionType, Union):
        args = [a for a in get_args(t) if a is not type(None)]
        return args[0] if len(args) == 1 else t
    return t


_ZERO = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint8": 0, "uint16": 0, "uint32": 0, "uint64": 0,
    "float64": 0.0, "bool": False, "string": "", "bytes": b"", "records": b"",
    "uuid": uuid.UUID(int=0), "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
}  # fmt: skip


def _empty(f: dataclasses.Field) -> Any:
    """A value for a required response field the request does not determine: empty, zero, or null."""
    if get_origin(f.type) in (types.UnionType, Union) and type(None) in get_args(f.type):
        return None
    if _is_array(f):
        return ()
    if isinstance(f.type, type) and dataclasses.is_dataclass(f.type):
        return _answer(f.type, None, ErrorCode.none)
    return _ZERO[f.metadata["kafka_type"]]
