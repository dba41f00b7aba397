"""Index lines ("OFFSET LENGTH\\n" per record, etl.formats.record_index) formatted by one loop
compiled at run time (etl.formats.jit): the record's frame offset and length in decimal, as
Arrow's CSV writer formats them, without a table and a writer per piece. Figures:
benchmarks/README.md, "Index lines compiled". None where etl.formats.jit cannot compile:
record_index then uses Arrow's writer, with the same bytes (tests/test_compiled_index.py).
"""

from __future__ import annotations

import ctypes

import numpy as np

from etl.formats.jit import compile_ir

# lines(sizes, n, start, out) -> bytes written: for each payload size, "{offset} {size + 16}\n"
# with offset from `start`, each frame after the previous; decimal digits written from the
# last one back (a udiv by 10 is a multiply).
_IR = r"""
define internal ptr @put_decimal(ptr %p, i64 %v) alwaysinline {
entry:
  br label %count
count:
  %d = phi i64 [1, %entry], [%d.next, %more]
  %t = phi i64 [%v, %entry], [%t.next, %more]
  %big = icmp uge i64 %t, 10
  br i1 %big, label %more, label %write
more:
  %t.next = udiv i64 %t, 10
  %d.next = add i64 %d, 1
  br label %count
write:
  %end = getelementptr i8, ptr %p, i64 %d
  br label %digit
digit:
  %q = phi ptr [%end, %write], [%q.prev, %digit]
  %x = phi i64 [%v, %write], [%x.next, %digit]
  %q.prev = getelementptr i8, ptr %q, i64 -1
  %x.next = udiv i64 %x, 10
  %r10 = mul i64 %x.next, 10
  %r = sub i64 %x, %r10
  %r8 = trunc i64 %r to i8
  %c = add i8 %r8, 48
  store i8 %c, ptr %q.prev, align 1
  %last = icmp eq ptr %q.prev, %p
  br i1 %last, label %done, label %digit
done:
  ret ptr %end
}

define i64 @lines(ptr %sizes, i64 %n, i64 %start, ptr %out) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %body]
  %w = phi ptr [%out, %entry], [%w.next, %body]
  %offset = phi i64 [%start, %entry], [%offset.next, %body]
  %done = icmp uge i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %sp = getelementptr i64, ptr %sizes, i64 %i
  %size = load i64, ptr %sp, align 8
  %frame = add i64 %size, 16
  %w1 = call ptr @put_decimal(ptr %w, i64 %offset)
  store i8 32, ptr %w1, align 1
  %w2 = getelementptr i8, ptr %w1, i64 1
  %w3 = call ptr @put_decimal(ptr %w2, i64 %frame)
  store i8 10, ptr %w3, align 1
  %w.next = getelementptr i8, ptr %w3, i64 1
  %offset.next = add i64 %offset, %frame
  %i.next = add i64 %i, 1
  br label %loop
exit:
  %a = ptrtoint ptr %w to i64
  %b = ptrtoint ptr %out to i64
  %written = sub i64 %a, %b
  ret i64 %written
}
"""

_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_void_p)
LINE_BOUND = 42  # two 20-digit numbers, a space and a newline


def index_lines(payload_sizes: np.ndarray, start: int) -> bytes | None:
    """The index lines of consecutive frames with these payload sizes from byte `start`, or
    None where the loop cannot be compiled. Offsets and lengths must be non-negative."""
    compiled = compile_ir(_IR, (("lines", _SIGNATURE),))
    if compiled is None:
        return None
    sizes = np.ascontiguousarray(payload_sizes, np.int64)
    out = np.empty(len(sizes) * LINE_BOUND, np.uint8)
    used = compiled.functions["lines"](sizes.ctypes.data, len(sizes), start, out.ctypes.data)
    return out[:used].tobytes()
