"""tf.train.Example serialisation of a block in one loop compiled at run time for its feature
layout (etl.formats.jit), when every feature has the same number of values in every record:
float32 features of any fixed length, int64 and bytes scalars (the tabular case: CSV, JSON
Lines, Parquet, SQL rows, and one image per record).

Why: proto_wire builds each record from column pieces (headers per distinct length, varints,
a side-by-side block, an element-wise join): a dozen passes over the block in NumPy and
Arrow, ~650 ns a record on the benchmark CSV. This loop writes each record once, headers and
values in schema order, exactly as proto_wire does (field numbers in its docstring); the
layout's constant headers (a float feature's are all constant) are compile-time constants.
Figures: benchmarks/README.md, "The Example loop compiled".

`serialize` returns None for any other layout (a variable-length list, an int64 or bytes list,
a null), or where etl.formats.jit cannot compile: proto_wire then serialises, with the same
bytes (tests/test_compiled_examples.py compares them on every varint boundary).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from etl.formats import proto_wire
from etl.formats.jit import compile_ir

_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                              ctypes.c_void_p)


@dataclass(frozen=True)
class _Slot:
    """One feature of a layout: its key, storage and values per record (float32: any; else 1)."""

    name: bytes
    storage: str
    per_record: int


def serialize(columns: Sequence[tuple[str, str, pa.Array]]) -> pa.LargeBinaryArray | None:
    """(name, storage, LargeList column) per feature -> serialized Examples, or None when the
    layout is not one this loop writes (see the module's docstring)."""
    n = len(columns[0][2]) if columns else 0
    if not n:
        return None
    slots: list[_Slot] = []
    pointers: list[int] = []
    keep: list[object] = []  # arrays the pointers point into, alive until the call returns
    blob_bytes = 0
    for name, storage, col in columns:
        if col.null_count:
            return None
        values, offsets = proto_wire._list_parts(col)
        if values.null_count:
            return None
        per_record = (int(offsets[1]) - int(offsets[0])) if len(offsets) > 1 else 0
        if not _writes(storage, per_record):
            return None
        if not (np.diff(offsets) == per_record).all():
            return None
        if storage == "float":
            data = proto_wire._float32s(values)
            pointers.append(data.ctypes.data)
        elif storage == "int64":
            data = proto_wire._int64s(values)
            pointers.append(data.ctypes.data)
        else:
            data = proto_wire._blobs(values)
            ends = proto_wire.offsets_of(data)  # a contiguous view
            buf = data.buffers()[2]
            pointers += [ends.ctypes.data, 0 if buf is None else buf.address]
            blob_bytes += int(ends[-1] - ends[0])
            keep.append(ends)
        keep.append(data)
        slots.append(_Slot(name.encode(), storage, per_record))
    layout = tuple(slots)
    compiled = _compiled(layout)
    if compiled is None:
        return None
    # NumPy's memory: glibc's heap, which the data path keeps (etl.base.heap), so the pages of
    # a block's bound, mostly never written, are not mapped and unmapped block after block
    out = np.empty(n * _bound(layout) + blob_bytes, np.uint8)
    ends = np.empty(n + 1, np.int64)
    ends[0] = 0
    args = np.array(pointers, np.uint64)
    used = compiled.functions["encode"](args.ctypes.data, n, out.ctypes.data, ends.ctypes.data)
    return proto_wire.binary(out[:used], ends)


def compile_layout(features: Sequence[tuple[str, str, int]]) -> bool:
    """Compile the loop for a layout ((name, storage, values per record) per feature, as
    `serialize` will find it) ahead of the first block; False where it writes no such layout
    or cannot compile."""
    if not features or not all(_writes(storage, n) for _, storage, n in features):
        return False
    return _compiled(tuple(_Slot(name.encode(), storage, n) for name, storage, n in features)) \
        is not None


def _writes(storage: str, per_record: int) -> bool:
    """Whether the loop writes a feature of this storage and this many values a record."""
    return per_record >= 1 and (storage == "float" or per_record == 1)


def _compiled(layout: tuple[_Slot, ...]) -> Any:
    return compile_ir(_ir(layout), (("encode", _SIGNATURE),))


def _bound(layout: tuple[_Slot, ...]) -> int:
    """Bytes a record can take beyond its blobs' own bytes (each varint at its 10 at most)."""
    return 11 + sum(64 + len(s.name) + 4 * s.per_record for s in layout)


def _float_prefix(slot: _Slot) -> bytes:
    """Every byte of a fixed-length float32 feature's map entry before its values."""
    payload = 4 * slot.per_record
    feature_head = proto_wire._feature_header("float", payload)
    return proto_wire._entry_header(slot.name, len(feature_head) + payload) + feature_head


# ----------------------------------------------------------------------------------------------
# The IR. encode(args, n, out, ends) writes record i at ends[i] and sets ends[i + 1]; args holds
# one pointer per float32 or int64 feature (its values) and two per bytes feature (its int64
# offsets, absolute into its data; its data); returns the bytes written.

_HELPERS = r"""
declare i64 @llvm.ctlz.i64(i64, i1)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define internal i64 @vlen(i64 %v) alwaysinline {
  %o = or i64 %v, 1
  %z = call i64 @llvm.ctlz.i64(i64 %o, i1 true)
  %b = sub i64 63, %z
  %m = mul i64 %b, 9
  %a = add i64 %m, 73
  %r = lshr i64 %a, 6
  ret i64 %r
}

define internal ptr @put(ptr %p, i64 %v) alwaysinline {
entry:
  br label %loop
loop:
  %q = phi ptr [%p, %entry], [%q.next, %more]
  %x = phi i64 [%v, %entry], [%x.next, %more]
  %small = icmp ult i64 %x, 128
  br i1 %small, label %last, label %more
more:
  %lo = trunc i64 %x to i8
  %hi = or i8 %lo, -128
  store i8 %hi, ptr %q, align 1
  %q.next = getelementptr i8, ptr %q, i64 1
  %x.next = lshr i64 %x, 7
  br label %loop
last:
  %b = trunc i64 %x to i8
  store i8 %b, ptr %q, align 1
  %r = getelementptr i8, ptr %q, i64 1
  ret ptr %r
}

define internal ptr @put_byte(ptr %p, i8 %b) alwaysinline {
  store i8 %b, ptr %p, align 1
  %r = getelementptr i8, ptr %p, i64 1
  ret ptr %r
}

define internal ptr @put_bytes(ptr %p, ptr %src, i64 %len) alwaysinline {
  call void @llvm.memcpy.p0.p0.i64(ptr %p, ptr %src, i64 %len, i1 false)
  %r = getelementptr i8, ptr %p, i64 %len
  ret ptr %r
}
"""


@dataclass
class _Parts:
    """The IR lines of a layout's features, gathered feature by feature."""

    globals_: list[str]
    load: list[str]  # the feature pointers, loaded once before the loop
    size: list[str]  # per record: what each entry's size needs
    write: list[str]  # per record: the bytes
    entries: list[str]  # each entry's size: a constant or an SSA value


@functools.lru_cache(maxsize=64)
def _ir(layout: tuple[_Slot, ...]) -> str:
    parts = _Parts([], [], [], [], [])
    arg = 0
    for j, slot in enumerate(layout):
        arg = _load(parts, j, slot, arg)
        if slot.storage == "float":
            _float_feature(parts, j, slot)
        else:
            _length_feature(parts, j, slot)
    total = ["  %F0 = add i64 0, 0"]
    for k, e in enumerate(parts.entries):
        total.append(f"  %F{k + 1} = add i64 %F{k}, {e}")
    return "\n".join([
        _HELPERS, *parts.globals_,
        "define i64 @encode(ptr %args, i64 %n, ptr %out, ptr %ends) {",
        "entry:", *parts.load, "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i.next, %body]",
        "  %at = phi i64 [0, %entry], [%at.next, %body]",
        "  %done = icmp uge i64 %i, %n",
        "  br i1 %done, label %exit, label %body",
        "body:",
        "  %i.next = add i64 %i, 1",
        *parts.size, *total,
        "  %start = getelementptr i8, ptr %out, i64 %at",
        "  %w0.m = call ptr @put_byte(ptr %start, i8 10)",
        f"  %w-1 = call ptr @put(ptr %w0.m, i64 %F{len(parts.entries)})",
        *parts.write,
        f"  %end.i = ptrtoint ptr %w{len(layout) - 1} to i64",
        "  %start.i = ptrtoint ptr %out to i64",
        "  %at.next = sub i64 %end.i, %start.i",
        "  %endp = getelementptr i64, ptr %ends, i64 %i.next",
        "  store i64 %at.next, ptr %endp, align 8",
        "  br label %loop",
        "exit:",
        "  ret i64 %at",
        "}",
    ])


def _load(parts: _Parts, j: int, slot: _Slot, arg: int) -> int:
    """Feature j's pointers from args[arg...]; returns the next argument's index."""
    names = [f"offs{j}", f"data{j}"] if slot.storage == "bytes" else [f"vals{j}"]
    for k, name in enumerate(names):
        parts.load += [f"  %{name}.p = getelementptr ptr, ptr %args, i64 {arg + k}",
                       f"  %{name} = load ptr, ptr %{name}.p, align 8"]
    return arg + len(names)


def _float_feature(parts: _Parts, j: int, slot: _Slot) -> None:
    """A fixed-length float32 feature: its whole map entry is a constant, then its values."""
    prefix = _float_prefix(slot)
    width = 4 * slot.per_record
    parts.globals_.append(_constant(f"@prefix{j}", prefix))
    parts.entries.append(str(len(prefix) + width))
    parts.write += [
        f"  %w{j}.a = call ptr @put_bytes(ptr %w{j - 1}, ptr @prefix{j}, i64 {len(prefix)})",
        f"  %src{j}.i = mul i64 %i, {width}",
        f"  %src{j} = getelementptr i8, ptr %vals{j}, i64 %src{j}.i",
        f"  %w{j} = call ptr @put_bytes(ptr %w{j}.a, ptr %src{j}, i64 {width})"]


def _length_feature(parts: _Parts, j: int, slot: _Slot) -> None:
    """An int64 or bytes scalar: its entry's lengths depend on the value's own length."""
    name = slot.name
    parts.globals_.append(_constant(f"@name{j}", name))
    head = b"\x0a" + proto_wire.varint(len(name))
    parts.globals_.append(_constant(f"@head{j}", head))
    if slot.storage == "int64":
        tag = "26"  # Feature.int64_list: 0x1a varint(inner + P), inner = 0x0a varint(P)
        parts.size += [f"  %v{j}.p = getelementptr i64, ptr %vals{j}, i64 %i",
                       f"  %v{j} = load i64, ptr %v{j}.p, align 8",
                       f"  %pl{j} = call i64 @vlen(i64 %v{j})",  # P: the value's varint
                       f"  %in{j}.v = call i64 @vlen(i64 %pl{j})",
                       f"  %in{j} = add i64 %in{j}.v, 1",
                       f"  %ip{j} = add i64 %in{j}, %pl{j}",
                       f"  %fh{j}.v = call i64 @vlen(i64 %ip{j})",
                       f"  %fh{j}.a = add i64 %fh{j}.v, 1",
                       f"  %f{j} = add i64 %fh{j}.a, %ip{j}"]  # the Feature's size
        value = [f"  %w{j}.h = call ptr @put(ptr %w{j}.g, i64 %ip{j})",
                 f"  %w{j}.i = call ptr @put_byte(ptr %w{j}.h, i8 10)",
                 f"  %w{j}.j = call ptr @put(ptr %w{j}.i, i64 %pl{j})",
                 f"  %w{j} = call ptr @put(ptr %w{j}.j, i64 %v{j})"]
    else:
        tag = "10"  # Feature.bytes_list: 0x0a varint(P), P = 0x0a varint(B) and the B bytes
        parts.size += [f"  %s{j}.p = getelementptr i64, ptr %offs{j}, i64 %i",
                       f"  %s{j} = load i64, ptr %s{j}.p, align 8",
                       f"  %t{j}.p = getelementptr i64, ptr %offs{j}, i64 %i.next",
                       f"  %t{j} = load i64, ptr %t{j}.p, align 8",
                       f"  %b{j} = sub i64 %t{j}, %s{j}",
                       f"  %bl{j} = call i64 @vlen(i64 %b{j})",
                       f"  %pl{j}.a = add i64 %bl{j}, 1",
                       f"  %pl{j} = add i64 %pl{j}.a, %b{j}",
                       f"  %fh{j}.v = call i64 @vlen(i64 %pl{j})",
                       f"  %fh{j}.a = add i64 %fh{j}.v, 1",
                       f"  %f{j} = add i64 %fh{j}.a, %pl{j}"]
        value = [f"  %w{j}.h = call ptr @put(ptr %w{j}.g, i64 %pl{j})",
                 f"  %w{j}.i = call ptr @put_byte(ptr %w{j}.h, i8 10)",
                 f"  %w{j}.j = call ptr @put(ptr %w{j}.i, i64 %b{j})",
                 f"  %src{j} = getelementptr i8, ptr %data{j}, i64 %s{j}",
                 f"  %w{j} = call ptr @put_bytes(ptr %w{j}.j, ptr %src{j}, i64 %b{j})"]
    # entry: 0x0a varint(body + F) body F; body = 0x0a varint(len name) name 0x12 varint(F)
    body_const = len(head) + len(name) + 1
    parts.size += [f"  %fl{j} = call i64 @vlen(i64 %f{j})",
                   f"  %bd{j} = add i64 %fl{j}, {body_const}",
                   f"  %bf{j} = add i64 %bd{j}, %f{j}",
                   f"  %el{j} = call i64 @vlen(i64 %bf{j})",
                   f"  %e{j}.a = add i64 %el{j}, 1",
                   f"  %e{j} = add i64 %e{j}.a, %bf{j}"]
    parts.entries.append(f"%e{j}")
    parts.write += [
        f"  %w{j}.a = call ptr @put_byte(ptr %w{j - 1}, i8 10)",
        f"  %w{j}.b = call ptr @put(ptr %w{j}.a, i64 %bf{j})",
        f"  %w{j}.c = call ptr @put_bytes(ptr %w{j}.b, ptr @head{j}, i64 {len(head)})",
        f"  %w{j}.d = call ptr @put_bytes(ptr %w{j}.c, ptr @name{j}, i64 {len(name)})",
        f"  %w{j}.e = call ptr @put_byte(ptr %w{j}.d, i8 18)",
        f"  %w{j}.f = call ptr @put(ptr %w{j}.e, i64 %f{j})",
        f"  %w{j}.g = call ptr @put_byte(ptr %w{j}.f, i8 {tag})",
        *value]


def _constant(name: str, data: bytes) -> str:
    text = "".join(f"\\{b:02X}" for b in data)
    return f'{name} = internal constant [{len(data)} x i8] c"{text}"'
