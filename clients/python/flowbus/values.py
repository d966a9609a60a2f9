"""Body value codecs: FBV (PROTOCOL.md 5.1) and JSON (5.2) over the value model of 5.3.

Python mapping: null ↔ None, bool ↔ bool, int ↔ int (signed 64-bit), double ↔ float,
string ↔ str, list ↔ list, map ↔ dict (str keys). Decoders are strict: everything 5.1 and 5.2
say a receiver MUST refuse raises WireError("malformed").
"""

from __future__ import annotations

import json
import math
import struct
from typing import TYPE_CHECKING, NoReturn, Union

from .wire import CONTENT_FBV, CONTENT_JSON, CONTENT_NONE, MAX_DEPTH, WireError

if TYPE_CHECKING:
    from typing_extensions import Buffer

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# A value of the value model (5.3); encoders also take tuples as lists.
Value = Union[None, bool, int, float, str, list["Value"], dict[str, "Value"]]

__all__ = ["Value", "check_value", "encode_fbv", "decode_fbv", "encode_json", "decode_json",
           "encode_value", "decode_value", "INT64_MIN", "INT64_MAX"]


def _quoted(text: str) -> str:
    """An error's excerpt of `text`: its first 64 characters, as the Swift tools cut it."""
    return text if len(text) <= 64 else f"{text[:64]}… ({len(text)} characters)"


def check_value(value: object, depth: int = 0) -> None:
    """Raises WireError unless `value` is in the value model (5.3) and nests at most 32 deep."""
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str):
            _utf8(value)
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise WireError("malformed", f"{_quoted(str(value))} does not fit a signed 64-bit int "
                                         "(send a float to mean a double)")
        return
    if isinstance(value, float):
        return
    if isinstance(value, (list, tuple, dict)):
        if depth >= MAX_DEPTH:
            raise WireError("malformed", f"value nests deeper than {MAX_DEPTH} containers")
        if isinstance(value, dict):
            for key, element in value.items():
                if not isinstance(key, str):
                    raise WireError("malformed", f"map key {key!r} is not a string")
                _utf8(key)
                check_value(element, depth + 1)
        else:
            for element in value:
                check_value(element, depth + 1)
        return
    raise WireError("malformed", f"{type(value).__name__} is not a wire value (None, bool, int, float, str, list, dict)")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise WireError("malformed", f"string {text[:64]!r} is not valid Unicode (lone surrogate)") from None


# MARK: FBV


def encode_fbv(value: Value) -> bytes:
    """One FBV value (5.1); map entries sorted by the keys' UTF-8 bytes."""
    check_value(value)
    out = bytearray()
    _fbv_write(value, out)
    return bytes(out)


def _fbv_write(value: Value, out: bytearray) -> None:
    if value is None:
        out += b"\x00"
    elif value is False:
        out += b"\x01"
    elif value is True:
        out += b"\x02"
    elif isinstance(value, int):
        out += b"\x03" + struct.pack(">q", value)
    elif isinstance(value, float):
        out += b"\x04" + struct.pack(">d", value)
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out += b"\x05" + struct.pack(">I", len(raw)) + raw
    elif isinstance(value, (list, tuple)):
        out += b"\x06" + struct.pack(">I", len(value))
        for element in value:
            _fbv_write(element, out)
    else:
        entries = sorted((key.encode("utf-8"), element) for key, element in value.items())
        out += b"\x07" + struct.pack(">I", len(entries))
        for key, element in entries:
            if len(key) > 0xFFFF:
                raise WireError("oversize", "map key longer than 65535 bytes")
            out += struct.pack(">H", len(key)) + key
            _fbv_write(element, out)


def decode_fbv(data: Buffer) -> Value:
    """Exactly one FBV value; trailing bytes, truncation, bad tags, counts larger than the
    remaining bytes, duplicate keys, invalid UTF-8 and nesting over 32 are malformed."""
    data = bytes(data)
    value, end = _fbv_read(data, 0, 0)
    if end != len(data):
        raise WireError("malformed", f"FBV: {len(data) - end} byte(s) after the value")
    return value


def _fbv_read(data: bytes, at: int, depth: int) -> tuple[Value, int]:
    if at >= len(data):
        raise WireError("malformed", "FBV: value is truncated")
    tag = data[at]
    at += 1
    if tag <= 0x02:
        return (None, False, True)[tag], at
    if tag in (0x03, 0x04):
        if at + 8 > len(data):
            raise WireError("malformed", "FBV: number is truncated")
        return struct.unpack_from(">q" if tag == 0x03 else ">d", data, at)[0], at + 8
    if tag not in (0x05, 0x06, 0x07):
        raise WireError("malformed", f"FBV: unknown tag {tag:#04x} at offset {at - 1}")
    if at + 4 > len(data):
        raise WireError("malformed", "FBV: count is truncated")
    count: int = struct.unpack_from(">I", data, at)[0]
    at += 4
    remaining = len(data) - at
    if tag == 0x05:
        if count > remaining:
            raise WireError("malformed", "FBV: string is longer than the remaining bytes")
        return _utf8_decode(data[at:at + count]), at + count
    if depth >= MAX_DEPTH:
        raise WireError("malformed", f"FBV: nesting deeper than {MAX_DEPTH}")
    # every element takes at least 1 byte, every map entry at least 3: check before allocating
    if count * (1 if tag == 0x06 else 3) > remaining:
        raise WireError("malformed", f"FBV: count {count} exceeds the remaining bytes")
    if tag == 0x06:
        items: list[Value] = []
        for _ in range(count):
            item, at = _fbv_read(data, at, depth + 1)
            items.append(item)
        return items, at
    entries: dict[str, Value] = {}
    for _ in range(count):
        if at + 2 > len(data):
            raise WireError("malformed", "FBV: key length is truncated")
        size: int = struct.unpack_from(">H", data, at)[0]
        at += 2
        if at + size > len(data):
            raise WireError("malformed", "FBV: key is truncated")
        key = _utf8_decode(data[at:at + size])
        at += size
        if key in entries:
            raise WireError("malformed", f"FBV: duplicate map key {key[:64]!r}")
        entries[key], at = _fbv_read(data, at, depth + 1)
    return entries, at


def _utf8_decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")  # Python's strict codec refuses overlongs, surrogates, > U+10FFFF
    except UnicodeDecodeError as error:
        raise WireError("malformed", f"invalid UTF-8: {error}") from None


# MARK: JSON


def encode_json(value: Value) -> bytes:
    """Canonical JSON (5.2): keys sorted by UTF-8 bytes (= code point order), no whitespace,
    non-ASCII as UTF-8, doubles always with '.' or an exponent; NaN/infinities refused."""
    check_value(value)
    try:
        text = _JSON.encode(value)
    except ValueError:  # the only one left after check_value: a float out of JSON's range
        raise WireError("malformed", "NaN and infinities cannot be written as JSON") from None
    return text.encode("utf-8")


_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _json_int(text: str) -> int | float:
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else _json_float(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise WireError("malformed", f"JSON: number {text[:64]} is outside the double range")
    return value


def _json_constant(name: str) -> NoReturn:
    raise WireError("malformed", f"JSON: {name} is not JSON")


def _json_pairs(pairs: list[tuple[str, Value]]) -> dict[str, Value]:
    result: dict[str, Value] = {}
    for key, value in pairs:
        if key in result:
            raise WireError("malformed", f"JSON: duplicate key {key[:64]!r}")
        result[key] = value
    return result


def decode_json(data: Buffer) -> Value:
    """One JSON value (5.2), refusing what 5.2 says readers MUST refuse."""
    data = bytes(data)
    if data.startswith(b"\xef\xbb\xbf"):
        raise WireError("malformed", "JSON: byte-order mark")
    text = _utf8_decode(data)
    try:
        value: Value = json.loads(text, parse_int=_json_int, parse_float=_json_float,
                                  parse_constant=_json_constant, object_pairs_hook=_json_pairs, strict=True)
    except WireError:
        raise
    except RecursionError:
        raise WireError("malformed", f"JSON: nesting deeper than {MAX_DEPTH}") from None
    except ValueError as error:
        raise WireError("malformed", f"JSON: {error}") from None
    check_value(value)  # nesting depth, lone surrogates from \u escapes
    return value


# MARK: By content type


def encode_value(value: Value, content_type: int) -> bytes:
    if content_type == CONTENT_JSON:
        return encode_json(value)
    if content_type == CONTENT_FBV:
        return encode_fbv(value)
    raise WireError("malformed", f"content type {content_type} cannot carry a value")


def decode_value(data: Buffer, content_type: int) -> Value:
    if content_type == CONTENT_JSON:
        return decode_json(data)
    if content_type == CONTENT_FBV:
        return decode_fbv(data)
    if content_type == CONTENT_NONE:
        raise WireError("malformed", "a value frame with content type none")
    raise WireError("malformed", f"unknown content type {content_type}")
