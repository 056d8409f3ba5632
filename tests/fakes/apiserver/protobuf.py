"""Request bodies in ``application/vnd.kubernetes.protobuf``, decoded into their JSON form.

Typed client-go clients send built-in kinds as protobuf (``kubectl auth can-i`` does); the real
server decodes them. The fake decodes the envelope (the ``k8s\\x00`` magic and a runtime.Unknown,
k8s.io/apimachinery/pkg/runtime/serializer/protobuf) and the kinds listed in ``SCHEMAS`` (field
numbers from k8s.io/api generated.proto), and always answers JSON, which those clients accept
too. Other kinds raise ``UndecodableProtobuf``.
"""

from __future__ import annotations

from typing import Any

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# message -> field number -> (json name, nested message or None for a string)
_OBJECT_META = {1: ("name", None), 2: ("generateName", None), 3: ("namespace", None)}
_RESOURCE_ATTRIBUTES = {1: ("namespace", None), 2: ("verb", None), 3: ("group", None), 4: ("version", None),
                        5: ("resource", None), 6: ("subresource", None), 7: ("name", None)}
_NON_RESOURCE_ATTRIBUTES = {1: ("path", None), 2: ("verb", None)}
_SSAR_SPEC = {1: ("resourceAttributes", _RESOURCE_ATTRIBUTES), 2: ("nonResourceAttributes", _NON_RESOURCE_ATTRIBUTES)}
SCHEMAS: dict[str, dict[int, tuple[str, Any]]] = {
    "authorization.k8s.io/v1/SelfSubjectAccessReview": {1: ("metadata", _OBJECT_META), 2: ("spec", _SSAR_SPEC)},
}


class UndecodableProtobuf(ValueError):
    pass


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise UndecodableProtobuf("truncated varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, value))
        elif wire == 2:
            size, i = _varint(data, i)
            out.append((number, data[i:i + size]))
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise UndecodableProtobuf(f"unsupported wire type {wire}")
    return out


def _message(data: bytes, schema: dict[int, tuple[str, Any]]) -> dict:
    """A message as JSON would carry it: empty strings and unknown fields left out."""
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema or not isinstance(value, bytes):
            continue
        name, nested = schema[number]
        if nested is not None:
            out[name] = _message(value, nested)
        elif value:
            out[name] = value.decode()
    return out


def decode(body: bytes) -> dict:
    """The JSON form (with apiVersion and kind) of a protobuf-encoded object."""
    if not body.startswith(MAGIC):
        raise UndecodableProtobuf("no k8s protobuf magic")
    unknown = dict(_fields(body[len(MAGIC):]))
    type_meta = {n: v for n, v in _fields(unknown.get(1, b""))} if isinstance(unknown.get(1), bytes) else {}
    api_version = type_meta.get(1, b"").decode() if isinstance(type_meta.get(1), bytes) else ""
    kind = type_meta.get(2, b"").decode() if isinstance(type_meta.get(2), bytes) else ""
    schema = SCHEMAS.get(f"{api_version}/{kind}")
    raw = unknown.get(2, b"")
    if schema is None or not isinstance(raw, bytes):
        raise UndecodableProtobuf(f"the fake apiserver cannot decode protobuf {api_version} {kind}; send JSON")
    return {"apiVersion": api_version, "kind": kind, **_message(raw, schema)}
