"""Plain data between the trusted grader and the process that runs a student's code.

What crosses is JSON: ``None``, booleans, numbers, strings, lists, tuples, string-keyed
dicts and numeric arrays (dtype, shape and base64 bytes). Decoding builds nothing but those
(no pickle, no classes named by the sender), so a message cannot run code in the grader;
anything else a student's function returns arrives as an :class:`Opaque` that only names its
type. Messages are framed by an 8-byte length.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import struct
from typing import Any

import numpy as np

# One message. The checks' replies are small arrays; the worst 8 MiB of JSON (a million tiny
# objects) is the most a student's process can make the grader decode (benchmarks/README.md).
MAX_BYTES = 8 * 2**20
_ARRAY_KINDS = "biufc"  # bool, int, unsigned, float, complex
HEADER = struct.Struct(">Q")


# What one reply may hold, checked before the grader computes anything with it: bytes do
# not bound shapes (a zero-size array of shape (2**30, 0) is 0 bytes, and its mean along
# the second axis is 8 GiB). An array's size counts each axis, empty ones as 1.
MAX_ELEMENTS = 1 << 22  # in one array (the checks' replies hold at most a few thousand)
MAX_TOTAL_ELEMENTS = 1 << 23  # in one reply
MAX_ITEMS = 1 << 16  # values of any kind in one reply


class WireError(Exception):
    """A message that is not well-formed plain data (or is too large)."""


class TooLarge(WireError):
    """A well-formed reply that holds more than any check asks for; says what, in words."""


@dataclasses.dataclass(frozen=True)
class Opaque:
    """Stands for a value that is not plain data (e.g. a haiku module object)."""

    type_name: str

    def __repr__(self) -> str:
        return f"<a {self.type_name} object>"


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) or (
        hasattr(value, "__array__") and hasattr(value, "shape") and hasattr(value, "dtype")
    )


def to_plain(value: Any, depth: int = 0) -> Any:
    """The JSON-able form of ``value`` (arrays as ``{"a": [dtype, shape, base64]}``)."""
    if depth > 32:
        return {"o": "deeply nested value"}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if _is_array(value):
        try:
            array = np.asarray(value)
        except Exception:  # noqa: BLE001 - e.g. a traced value: describe it instead
            return {"o": type(value).__name__}
        if array.dtype.kind not in _ARRAY_KINDS:
            return {"o": f"array of dtype {array.dtype}"}
        data = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")
        return {"a": [array.dtype.str, list(array.shape), data]}
    if isinstance(value, tuple):
        return {"t": [to_plain(v, depth + 1) for v in value]}
    if isinstance(value, list):
        return {"l": [to_plain(v, depth + 1) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"d": {k: to_plain(v, depth + 1) for k, v in value.items()}}
    if isinstance(value, Opaque):
        return {"o": value.type_name}
    return {"o": type(value).__name__}


def from_plain(plain: Any) -> Any:
    """Inverse of :func:`to_plain`; raises :class:`WireError` on anything else."""
    if plain is None or isinstance(plain, (bool, int, float, str)):
        return plain
    if not isinstance(plain, dict) or len(plain) != 1:
        raise WireError(f"unexpected value {type(plain).__name__}")
    ((tag, body),) = plain.items()
    if tag == "a":
        dtype_str, shape, data = body
        dtype = np.dtype(str(dtype_str))
        if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None:
            raise WireError(f"arrays of dtype {dtype} are not accepted")
        shape = tuple(int(n) for n in shape)
        raw = base64.b64decode(data, validate=True)
        if any(n < 0 for n in shape) or int(np.prod(shape)) * dtype.itemsize != len(raw):
            raise WireError("an array's bytes do not match its shape")
        return np.frombuffer(raw, dtype).reshape(shape).copy()
    if tag == "t":
        return tuple(from_plain(v) for v in body)
    if tag == "l":
        return [from_plain(v) for v in body]
    if tag == "d":
        return {str(k): from_plain(v) for k, v in body.items()}
    if tag == "o":
        return Opaque(str(body))
    raise WireError(f"unknown tag {tag!r}")


def array_size(shape: tuple[int, ...]) -> int:
    """Elements an array of ``shape`` stands for, an empty axis counted as 1: a bound on
    what any reduction or broadcast of it can allocate."""
    size = 1
    for n in shape:
        size *= max(int(n), 1)
    return size


def check_sizes(value: Any) -> None:
    """Raise :class:`TooLarge` if decoded ``value`` holds an array over :data:`MAX_ELEMENTS`,
    more than :data:`MAX_TOTAL_ELEMENTS` in all, or more than :data:`MAX_ITEMS` values."""
    todo, total, items = [value], 0, 0
    while todo:
        item = todo.pop()
        items += 1
        if items > MAX_ITEMS:
            raise TooLarge(f"more than {MAX_ITEMS} values")
        if isinstance(item, np.ndarray):
            size = array_size(item.shape)
            if size > MAX_ELEMENTS:
                raise TooLarge(f"an array of shape {item.shape}")
            total += size
            if total > MAX_TOTAL_ELEMENTS:
                raise TooLarge(f"arrays of more than {MAX_TOTAL_ELEMENTS} elements in all")
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())


def encode(value: Any) -> bytes:
    return json.dumps(to_plain(value), separators=(",", ":")).encode("utf-8")


def decode(data: bytes) -> Any:
    try:
        return from_plain(json.loads(data.decode("utf-8")))
    except WireError:
        raise
    except Exception as err:  # noqa: BLE001 - malformed JSON, deep nesting, bad base64...
        raise WireError(f"malformed message ({type(err).__name__})") from None


def digest(value: Any) -> str:
    """A stable hash of plain data (the key of a recorded reference result)."""
    return hashlib.sha256(encode(value)).hexdigest()


def send(fd: int, value: Any) -> None:
    """Write one framed message to the file descriptor ``fd``."""
    send_bytes(fd, encode(value))


def frame(payload: bytes) -> bytes:
    """An encoded message with its length in front."""
    return HEADER.pack(len(payload)) + payload


def send_bytes(fd: int, payload: bytes) -> None:
    """Write an encoded message, framed, to ``fd`` (a blocking one: the worker's side)."""
    view = memoryview(frame(payload))
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_exactly(fd: int, n: int) -> bytes:
    """``n`` bytes from the blocking ``fd``; ``EOFError`` if the other side closed first."""
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int) -> Any:
    """Read one framed message from a blocking ``fd`` (the worker's side; the grader reads
    with deadlines, :class:`m2l_nlp.grading.trusted.remote.Worker`)."""
    (size,) = HEADER.unpack(read_exactly(fd, HEADER.size))
    if size > MAX_BYTES:
        raise WireError(f"a message of {size} bytes is over the limit")
    return decode(read_exactly(fd, size))
