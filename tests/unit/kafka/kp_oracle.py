"""kafka-python 3.0 as an independent oracle for raftlog.kafka.messages (tests only).

kafka-python has two codecs: `kafka.protocol.<family>` classes generated from Kafka's JSON
message definitions (every version), and the hand-written `kafka.protocol.old` classes (the
versions it has). raftlog's message types use Kafka's field names, so one of our messages
becomes either kind by name (a plain tuple, such as a (topic, partitions) pair, by position):
`new_encode` and `old_encode` encode it with kafka-python; `new_decode` decodes bytes with
kafka-python into plain dicts and lists.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st
from kafka.protocol.old.types import Array, Schema

INT8 = st.integers(-(2**7), 2**7 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=12)
NULLABLE_TEXT = st.none() | TEXT


def small_tuples(elements: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(elements, max_size=3).map(tuple)


def bits(operations: int) -> set[int] | None:
    """kafka-python's BitField value for an int32 of authorized operations (INT32_MIN, Kafka's
    "not asked for", is its None)."""
    if operations == -(2**31):
        return None
    return {bit for bit in range(32) if operations >> bit & 1}


def plain(value: Any) -> Any:
    """Our message as dicts (dataclasses, NamedTuples) and lists (other tuples)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "_asdict"):
        return {name: plain(v) for name, v in value._asdict().items()}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value


def _build(cls: Any, data: dict[str, Any] | list[Any]) -> Any:
    """A kafka-python data container of `cls` from `data` (our field names are its)."""
    if isinstance(data, list):
        data = dict(zip(cls._struct.fields, data, strict=False))
    kwargs = {}
    for name, value in data.items():
        field = cls._struct.fields.get(name)
        if field is None:
            raise AssertionError(f"kafka-python's {cls.__name__} has no field {name!r}")
        if field.is_struct_array() and value is not None:
            value = [_build(field.data_class, item) for item in value]
        elif field.is_struct() and value is not None:
            value = _build(field.data_class, value)
        kwargs[name] = value
    return cls(**kwargs)


def new_encode(kp_class: Any, message: Any, version: int) -> bytes:
    """`message` encoded by kafka-python's generated codec at `version`."""
    return bytes(_build(kp_class, plain(message)).encode(version=version))


def new_decode(kp_class: Any, data: bytes, version: int) -> dict[str, Any]:
    """`data` decoded by kafka-python's generated codec, as dicts and lists."""
    decoded: dict[str, Any] = kp_class.decode(data, version=version).to_dict()
    return decoded


def _old_value(kind: Any, value: Any) -> Any:
    if isinstance(kind, Schema):
        if isinstance(value, list):
            return tuple(_old_value(k, v) for k, v in zip(kind.fields, value, strict=True))
        return tuple(_old_value(k, value[n]) for n, k in zip(kind.names, kind.fields, strict=True))
    if isinstance(kind, Array) and value is not None:
        return [_old_value(kind.array_of, item) for item in value]
    return value


def old_encode(old_class: Any, message: Any) -> bytes:
    """`message` encoded by kafka-python's hand-written class for one version."""
    values = _old_value(old_class.SCHEMA, plain(message))
    return bytes(old_class(*values).encode())


def assert_matches_kafka_python(
    message: Any, version: int, kp_class: Any, old_module: Any = None, old_name: str = ""
) -> None:
    """`message` encodes at `version` to the bytes both of kafka-python's codecs give it (the
    hand-written one where `old_module` has `old_name`_v`version`), and decodes back to itself."""
    encoded = message.encode(version)
    assert encoded == new_encode(kp_class, message, version)
    old_class = getattr(old_module, f"{old_name}_v{version}", None)
    if old_class is not None:
        assert encoded == old_encode(old_class, message)
    assert type(message).decode(encoded, version) == message
