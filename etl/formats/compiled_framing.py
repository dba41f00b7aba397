"""TFRecord framing of a whole column in one loop compiled at run time (llvmlite, LLVM's JIT),
with the CPU's own CRC32C instruction (etl.formats.jit compiles it).

Why: framing is the last step of the data path that needs a call per record. fastcrc's CRC of
a ~180-byte record takes a few nanoseconds, but the call around it (a Python `bytes` per
record, then the call with the GIL held) takes ~200, and Arrow's `take` that sorts the run
copies every record once more before the framing copies it again. This loop reads each record
once in the run's order, writes its length, its bytes and both masked CRCs, and holds no GIL
(ctypes releases it for the call). No installed library offers a batched CRC32C. Figures:
benchmarks/README.md, "The framing loop compiled".

Where etl.formats.jit cannot compile, `framer()` is None and etl.formats.tfrecord frames with
fastcrc as before. The bytes are the same either way (tests/test_compiled_framing.py).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from etl.formats.jit import compile_ir

# The helpers: CRC32C = ~crc32(~0, bytes) with the SSE 4.2 instruction, 8 bytes at a time, then
# the tail byte by byte; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (-1568478504, an i32).
_IR = r"""
declare i32 @llvm.x86.sse42.crc32.32.8(i32, i8)
declare i64 @llvm.x86.sse42.crc32.64.64(i64, i64)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
declare void @llvm.prefetch.p0(ptr, i32, i32, i32)

define internal i32 @crc32c(ptr %p, i64 %n) alwaysinline {
entry:
  br label %words
words:
  %i = phi i64 [0, %entry], [%i.next, %word]
  %c = phi i64 [4294967295, %entry], [%c.next, %word]
  %left = sub i64 %n, %i
  %more = icmp uge i64 %left, 8
  br i1 %more, label %word, label %tail
word:
  %wp = getelementptr i8, ptr %p, i64 %i
  %w = load i64, ptr %wp, align 1
  %c.next = call i64 @llvm.x86.sse42.crc32.64.64(i64 %c, i64 %w)
  %i.next = add i64 %i, 8
  br label %words
tail:
  %c32 = trunc i64 %c to i32
  br label %bytes
bytes:
  %j = phi i64 [%i, %tail], [%j.next, %byte]
  %d = phi i32 [%c32, %tail], [%d.next, %byte]
  %done = icmp uge i64 %j, %n
  br i1 %done, label %exit, label %byte
byte:
  %bp = getelementptr i8, ptr %p, i64 %j
  %b = load i8, ptr %bp, align 1
  %d.next = call i32 @llvm.x86.sse42.crc32.32.8(i32 %d, i8 %b)
  %j.next = add i64 %j, 1
  br label %bytes
exit:
  %x = xor i32 %d, -1
  ret i32 %x
}

define internal i32 @mask(i32 %c) alwaysinline {
  %a = lshr i32 %c, 15
  %b = shl i32 %c, 17
  %o = or i32 %a, %b
  %m = add i32 %o, -1568478504
  ret i32 %m
}

"""

# One loop over records order[0], order[1], ...: record k is data[offsets[k]:offsets[k + 1]];
# `at` is where the next one goes in out. The first three cache lines of the record 8 places
# ahead are prefetched: a run's order, and a shard's merged order, read records at random
# places in a block larger than the CPU's L2 (benchmarks/README.md, "The framing loop compiled").
_LOOP = r"""
define void @{name}(ptr %data, ptr %offsets, ptr %order, i64 %n, ptr %out) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %body]
  %at = phi i64 [0, %entry], [%at.next, %body]
  %done = icmp uge i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %i.next = add i64 %i, 1
  %ahead = add i64 %i, 8
  %near = icmp ult i64 %ahead, %n
  %ahead.i = select i1 %near, i64 %ahead, i64 %i
  %akp = getelementptr i64, ptr %order, i64 %ahead.i
  %ak = load i64, ptr %akp, align 8
  %asp = getelementptr i64, ptr %offsets, i64 %ak
  %as = load i64, ptr %asp, align 8
  %asrc = getelementptr i8, ptr %data, i64 %as
  call void @llvm.prefetch.p0(ptr %asrc, i32 0, i32 3, i32 1)
  %asrc64 = getelementptr i8, ptr %asrc, i64 64
  call void @llvm.prefetch.p0(ptr %asrc64, i32 0, i32 3, i32 1)
  %asrc128 = getelementptr i8, ptr %asrc, i64 128
  call void @llvm.prefetch.p0(ptr %asrc128, i32 0, i32 3, i32 1)
  %kp = getelementptr i64, ptr %order, i64 %i
  %k = load i64, ptr %kp, align 8
  %sp = getelementptr i64, ptr %offsets, i64 %k
  %s = load i64, ptr %sp, align 8
  %k1 = add i64 %k, 1
  %ep = getelementptr i64, ptr %offsets, i64 %k1
  %e = load i64, ptr %ep, align 8
  %len = sub i64 %e, %s
  %src = getelementptr i8, ptr %data, i64 %s
  %head = getelementptr i8, ptr %out, i64 %at
{body}
  br label %loop
exit:
  ret void
}}
"""

# framing: u64 length, u32 masked CRC of the length's 8 bytes, the bytes, u32 masked CRC of them
_FRAME = """
  store i64 %len, ptr %head, align 1
  %hc0 = call i64 @llvm.x86.sse42.crc32.64.64(i64 4294967295, i64 %len)
  %hc1 = trunc i64 %hc0 to i32
  %hc = xor i32 %hc1, -1
  %hm = call i32 @mask(i32 %hc)
  %hcp = getelementptr i8, ptr %head, i64 8
  store i32 %hm, ptr %hcp, align 1
  %dst = getelementptr i8, ptr %head, i64 12
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %len, i1 false)
  %dc = call i32 @crc32c(ptr %src, i64 %len)
  %dm = call i32 @mask(i32 %dc)
  %tp = getelementptr i8, ptr %dst, i64 %len
  store i32 %dm, ptr %tp, align 1
  %at16 = add i64 %at, 16
  %at.next = add i64 %at16, %len"""

# a take: the bytes alone, back to back
_TAKE = """
  call void @llvm.memcpy.p0.p0.i64(ptr %head, ptr %src, i64 %len, i1 false)
  %at.next = add i64 %at, %len"""

_MODULE = _IR + _LOOP.format(name="frame", body=_FRAME) + _LOOP.format(name="take", body=_TAKE)

_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_int64, ctypes.c_void_p)


class Framer:
    """One of the compiled loops (etl.formats.jit keeps its code alive)."""

    def __init__(self, loop: Any):
        self._loop = loop

    def __call__(self, data_address: int, offsets: np.ndarray, order: np.ndarray,
                 out: np.ndarray) -> None:
        """Records order[0], order[1], ... into `out` (uint8), exactly their output size.
        `offsets` (int64, absolute into the data at data_address) and `order` (int64, every
        value < len(offsets) - 1) are the caller's to check: the loop trusts them."""
        self._loop(data_address, offsets.ctypes.data, order.ctypes.data, len(order),
                   out.ctypes.data)


def framer() -> Framer | None:
    """The compiled framing loop of this process (compiled on first use), or None where
    etl.formats.jit cannot compile (no SSE 4.2, no llvmlite)."""
    return _loop("frame")


def taker() -> Framer | None:
    """The same loop copying the records alone: a binary column's `take`, as a shard gathers
    its merged records (etl.shuffle.shard_writer), or None as for `framer`."""
    return _loop("take")


def _loop(name: str) -> Framer | None:
    compiled = compile_ir(_MODULE, (("frame", _SIGNATURE), ("take", _SIGNATURE)))
    return None if compiled is None else Framer(compiled.functions[name])
