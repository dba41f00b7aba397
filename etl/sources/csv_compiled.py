"""Plain CSV chunks parsed by one loop compiled at run time (etl.formats.jit), for the CSV fast
path: a chunk of whole lines whose every field is plain (numbers as `-?D+(.D+)?([eE][+-]?D+)?`,
text with no quote character, no carriage return) becomes the RecordBatch Arrow's CSV reader
gives for it, in one pass over the bytes. Anything else in a chunk (a quote, a blank or marked
number, a number outside the exact fast path below, a wrong field count) makes `parse` return
None, and the caller hands the chunk to Arrow, which decides as it always did: this loop only
ever takes what Arrow would take, with Arrow's values (tests/test_csv_compiled.py holds the
two against each other). Figures: benchmarks/README.md, "CSV chunks parsed by a compiled loop".

Numbers are exact by construction, never by a second rounding:
- int64: at most 18 digits (always in range), the sign `-` or none;
- float64: Clinger's fast path: at most 2^53 as an integer of digits, and a power of ten
  within 10^±22, both exact doubles, so one IEEE multiply or divide rounds the value once;
- float32: that double, taken only where rounding it to float32 gives what rounding the
  decimal itself would: inside float32's normal range, and not exactly on a midpoint between
  two float32s (only there can two roundings differ); zero keeps its sign.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from etl.formats.jit import compile_ir

KINDS = {pa.float32(): "f32", pa.float64(): "f64", pa.int64(): "i64", pa.binary(): "bin"}
_NUMPY = {pa.float32(): np.float32, pa.float64(): np.float64, pa.int64(): np.int64}

# What the loop takes as a number: a null marker that matches it would be read as that number
# (Arrow reads it as null), so such markers turn the loop off.
PLAIN_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


PAD = bytes(64)  # after a chunk: the loop may load (never use) up to 64 bytes past its end
BOM = b"\xef\xbb\xbf"  # Arrow drops it at the start of what it reads, and only there


def read_chunks(data: Any, block_size: int, quote: bytes, parser: Callable[[], ChunkParser | None],
                alone: Callable[[memoryview], Iterator[pa.RecordBatch]],
                rest: Callable[[bytes, Any], Iterator[pa.RecordBatch]],
                tail: Callable[[bytes], Iterator[pa.RecordBatch]]
                ) -> Iterator[tuple[pa.RecordBatch, bool]]:
    """(batch, plain) for the batches of `data` (a read handle at a line start, where no quote
    is open; plain: the loop's, so no value was quoted and every number is finite), read
    `block_size` bytes at a time and cut after the last newline, each chunk through the
    compiled loop (`parser()`, asked once a full block shows the data is not small), else:
    - `alone(chunk)`: Arrow on the chunk by itself, when it holds no quote character (so no
      quoted value can run across its ends);
    - `rest(chunk + what follows it, data)`: Arrow's streaming reader from this chunk to the
      end, the only reader that can follow a quote across chunks (and, at the start, the one
      that drops a BOM);
    - `tail(bytes after the last newline)`: Arrow on the end (the sentinel row follows).
    No chunk but the first starts with a BOM (Arrow would drop it there, and only there)."""
    compiled: ChunkParser | None = None
    carry, asked, at_start = b"", False, True
    while True:
        got = data.read(block_size)
        if not got:
            break
        if not asked and len(got) == block_size:
            compiled, asked = parser(), True
        buf = b"".join((carry, got, PAD))
        end = len(buf) - len(PAD)
        cut = buf.rfind(b"\n", 0, end) + 1
        while cut and buf.startswith(BOM, cut):  # the next chunk would start with one
            cut = buf.rfind(b"\n", 0, cut - 1) + 1
        if not cut:
            if end > 2 * block_size:  # no line break in sight (lines end in \r?): Arrow's
                yield from _arrows(rest(buf[:end], data))
                return
            carry = buf[:end]
            continue
        bom = at_start and buf.startswith(BOM)
        batch = compiled.parse(buf, cut) if compiled is not None and not bom else None
        if batch is not None:
            yield batch, True
        elif not bom and not (quote and buf.find(quote, 0, cut) >= 0):
            yield from _arrows(alone(memoryview(buf)[:cut]))
        else:
            yield from _arrows(rest(buf[:end], data))
            return
        carry, at_start = buf[cut:end], False
    yield from _arrows(tail(carry))


def _arrows(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[pa.RecordBatch, bool]]:
    for batch in batches:
        yield batch, False


class ChunkParser:
    """`parse(buf, size)`: the RecordBatch of `buf`'s first `size` bytes (whole lines, `PAD`
    bytes or more after them), or None where Arrow must parse them."""

    def __init__(self, names: list[str], types: list[pa.DataType], function: object):
        self.types, self._function = types, function
        self.schema = pa.schema([pa.field(n, t) for n, t in zip(names, types, strict=True)])

    def parse(self, buf: bytes, size: int) -> pa.RecordBatch | None:
        # every row holds a byte per separator and at least one per number
        rows = size // (len(self.types) + sum(t != pa.binary() for t in self.types)) + 1
        outs, arrays = [], []
        for t in self.types:
            if t == pa.binary():
                offsets = np.zeros(rows + 1, np.int32)
                data = np.empty(size + 16, np.uint8)  # the loop stores 16 bytes at a time
                outs += [offsets.ctypes.data, data.ctypes.data]
                arrays.append((offsets, data))
            else:
                values = np.empty(rows, _NUMPY[t])
                outs.append(values.ctypes.data)
                arrays.append(values)
        pointers = np.array(outs, np.uint64)
        rows = self._function(buf, size, pointers.ctypes.data)
        if rows < 0:
            return None
        columns = []
        for t, made in zip(self.types, arrays, strict=True):
            if t == pa.binary():
                offsets, data = made
                used = int(offsets[rows])
                columns.append(pa.Array.from_buffers(t, rows, [
                    None, pa.py_buffer(offsets[:rows + 1]), pa.py_buffer(data[:used].copy())]))
            else:
                columns.append(pa.array(made[:rows], t))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def chunk_parser(names: list[str], types: list[pa.DataType], delimiter: str,
                 quote: str) -> ChunkParser | None:
    """A parser for chunks of these columns, or None: a column of another type, a delimiter
    or quote a number could hold, or no compiled loops on this machine (etl.formats.jit)."""
    kinds = tuple(KINDS.get(t) for t in types)
    if None in kinds or len(delimiter.encode()) != 1 or len(quote.encode()) > 1:
        return None
    delim = delimiter.encode()[0]
    if chr(delim) in "0123456789.-+eE\n\r" or (quote and quote == delimiter):
        return None
    compiled = _compiled(kinds, delim, quote.encode()[0] if quote else 13)  # 13: refused anyway
    return None if compiled is None else ChunkParser(names, types, compiled)


_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64, ctypes.c_uint64)


@functools.lru_cache(maxsize=32)
def _compiled(kinds: tuple[str, ...], delim: int, quote: int) -> object | None:
    compiled = compile_ir(_ir(kinds, delim, quote), (("parse", _SIGNATURE),))
    return None if compiled is None else compiled.functions["parse"]


# ----------------------------------------------------------------------------------------------
# The IR. parse(p, len, outs) reads rows from p until p + len (the last byte a newline) and
# returns the rows read, or -1 at the first field it does not take. outs holds one pointer per
# number column (its values) and two per text column (its int32 offsets, offsets[0] = 0 set by
# the caller; its bytes). Every scan stops at a newline, so no load passes the chunk's end.

# a field's sign: %neg after a "-", whose digits then start at %d0
_SIGN = """entry:
  %c0 = load i8, ptr %s, align 1
  %neg = icmp eq i8 %c0, 45
  %skip = zext i1 %neg to i64
  %d0 = getelementptr i8, ptr %s, i64 %skip
"""


def _digit_loop(label: str, p: str, start: str, entry: str, w0: str, loop: int) -> str:
    """IR of a run of digits read into %{p}w (from w0), counted in %{p}n, stopped at the
    first other byte (%{p}c, at %{p}q); a 19th significant digit fails (Arrow parses)."""
    return f"""{label}:
  %{p}q = phi ptr [{start}, {entry}], [%{p}q.next, %{label}.d]
  %{p}w = phi i64 [{w0}, {entry}], [%{p}w.next, %{label}.d]
  %{p}n = phi i64 [0, {entry}], [%{p}n.next, %{label}.d]
  %{p}c = load i8, ptr %{p}q, align 1
  %{p}dg = sub i8 %{p}c, 48
  %{p}isdig = icmp ult i8 %{p}dg, 10
  br i1 %{p}isdig, label %{label}.d, label %{label}.end
{label}.d:
  %{p}big = icmp uge i64 %{p}w, 100000000000000000
  %{p}w10 = mul i64 %{p}w, 10
  %{p}dz = zext i8 %{p}dg to i64
  %{p}w.next = add i64 %{p}w10, %{p}dz
  %{p}n.next = add i64 %{p}n, 1
  %{p}q.next = getelementptr i8, ptr %{p}q, i64 1
  br i1 %{p}big, label %fail, label %{label}, !llvm.loop !{loop}
"""


def _lead(n: str, ok: str) -> str:
    """IR of a field's sign (%neg; its digits start at %d0) and how many digits follow (%{n}):
    1 to 8 go on to `ok`, any other count to %slow."""
    return _SIGN + f"""  %{n} = call i64 @digits(ptr %d0)
  %{n}.m = add i64 %{n}, -1
  %{n}.short = icmp ult i64 %{n}.m, 8
  br i1 %{n}.short, label %{ok}, label %slow
"""


# an int64 field's end: its value (%v, negated after a "-") stored, and the byte after the
# terminator at %q returned
_INT_DONE = """done:
  %minus = sub i64 0, %v
  %value = select i1 %neg, i64 %minus, i64 %v
  store i64 %value, ptr %dst, align 8
  %after = getelementptr i8, ptr %q, i64 1
  ret ptr %after
"""


_HELPERS = r"""
@p10 = internal constant [23 x double] [double 1.0, double 1.0e1, double 1.0e2, double 1.0e3,
  double 1.0e4, double 1.0e5, double 1.0e6, double 1.0e7, double 1.0e8, double 1.0e9,
  double 1.0e10, double 1.0e11, double 1.0e12, double 1.0e13, double 1.0e14, double 1.0e15,
  double 1.0e16, double 1.0e17, double 1.0e18, double 1.0e19, double 1.0e20, double 1.0e21,
  double 1.0e22]

declare i16 @llvm.cttz.i16(i16, i1)

; how many digits start at q (0-16): one 16-byte compare, no branch per digit
define internal i64 @digits(ptr %q) alwaysinline {
  %v = load <16 x i8>, ptr %q, align 1
  %x = sub <16 x i8> %v, <i8 48, i8 48, i8 48, i8 48, i8 48, i8 48, i8 48, i8 48,
                          i8 48, i8 48, i8 48, i8 48, i8 48, i8 48, i8 48, i8 48>
  %d = icmp ult <16 x i8> %x, <i8 10, i8 10, i8 10, i8 10, i8 10, i8 10, i8 10, i8 10,
                               i8 10, i8 10, i8 10, i8 10, i8 10, i8 10, i8 10, i8 10>
  %m = bitcast <16 x i1> %d to i16
  %nm = xor i16 %m, -1
  %z = call i16 @llvm.cttz.i16(i16 %nm, i1 false)
  %r = zext i16 %z to i64
  ret i64 %r
}

; the value of the n (1-8) digits at q, eight at a time in one register (fast_float's
; parse_eight_digits_unrolled, after the digits are shifted up behind zeros)
define internal i64 @value8(ptr %q, i64 %n) alwaysinline {
  %v = load i64, ptr %q, align 1
  %x = sub i64 %v, 3472328296227680304
  %pad = sub i64 8, %n
  %sh = shl i64 %pad, 3
  %y = shl i64 %x, %sh
  %y10 = mul i64 %y, 10
  %y8 = lshr i64 %y, 8
  %t = add i64 %y10, %y8
  %lo = and i64 %t, 1095216660735
  %lo.m = mul i64 %lo, 4294967296000100
  %t16 = lshr i64 %t, 16
  %hi = and i64 %t16, 1095216660735
  %hi.m = mul i64 %hi, 42949672960001
  %sum = add i64 %lo.m, %hi.m
  %r = lshr i64 %sum, 32
  ret i64 %r
}

@e10 = internal constant [9 x i64] [i64 1, i64 10, i64 100, i64 1000, i64 10000, i64 100000,
  i64 1000000, i64 10000000, i64 100000000]

define internal ptr @int_slow(ptr %s, i8 %term, ptr %dst) noinline {
""" + _SIGN + "  br label %int\n" + _digit_loop("int", "", "%d0", "%entry", "0", 0) + r"""int.end:
  %some = icmp ne i64 %n, 0
  %ends = icmp eq i8 %c, %term
  %ok = and i1 %some, %ends
  %v = add i64 %w, 0
  br i1 %ok, label %done, label %fail
""" + _INT_DONE + r"""fail:
  ret ptr null
}

define internal ptr @float_slow(ptr %s, i8 %term, ptr %dst) noinline {
""" + _SIGN + "  br label %int\n" + r"""""" + _digit_loop("int", "", "%d0", "%entry", "0", 1) + r"""int.end:
  %some = icmp ne i64 %n, 0
  br i1 %some, label %dot, label %fail
dot:
  %isdot = icmp eq i8 %c, 46
  br i1 %isdot, label %frac.start, label %exp.check
frac.start:
  %f0 = getelementptr i8, ptr %q, i64 1
  br label %frac
""" + _digit_loop("frac", "f", "%f0", "%frac.start", "%w", 2) + r"""frac.end:
  %fsome = icmp ne i64 %fn, 0
  br i1 %fsome, label %exp.check, label %fail
exp.check:
  %eq = phi ptr [%q, %dot], [%fq, %frac.end]
  %ew = phi i64 [%w, %dot], [%fw, %frac.end]
  %efrac = phi i64 [0, %dot], [%fn, %frac.end]
  %ec = phi i8 [%c, %dot], [%fc, %frac.end]
  %lower = or i8 %ec, 32
  %ise = icmp eq i8 %lower, 101
  br i1 %ise, label %exp.sign, label %finish
exp.sign:
  %e0 = getelementptr i8, ptr %eq, i64 1
  %sc = load i8, ptr %e0, align 1
  %eneg = icmp eq i8 %sc, 45
  %epos = icmp eq i8 %sc, 43
  %signed = or i1 %eneg, %epos
  %eskip = zext i1 %signed to i64
  %ed0 = getelementptr i8, ptr %e0, i64 %eskip
  br label %exp
exp:
  %xq = phi ptr [%ed0, %exp.sign], [%xq.next, %exp.d]
  %x = phi i64 [0, %exp.sign], [%x.next, %exp.d]
  %xn = phi i64 [0, %exp.sign], [%xn.next, %exp.d]
  %xc = load i8, ptr %xq, align 1
  %xdg = sub i8 %xc, 48
  %xisdig = icmp ult i8 %xdg, 10
  br i1 %xisdig, label %exp.d, label %exp.end
exp.d:
  %x10 = mul i64 %x, 10
  %xdz = zext i8 %xdg to i64
  %x.next = add i64 %x10, %xdz
  %xn.next = add i64 %xn, 1
  %xq.next = getelementptr i8, ptr %xq, i64 1
  %xlong = icmp ugt i64 %xn.next, 4
  br i1 %xlong, label %fail, label %exp, !llvm.loop !3
exp.end:
  %xsome = icmp ne i64 %xn, 0
  br i1 %xsome, label %exp.ok, label %fail
exp.ok:
  %xminus = sub i64 0, %x
  %xs = select i1 %eneg, i64 %xminus, i64 %x
  br label %finish
finish:
  %tq = phi ptr [%eq, %exp.check], [%xq, %exp.ok]
  %tc = phi i8 [%ec, %exp.check], [%xc, %exp.ok]
  %texp = phi i64 [0, %exp.check], [%xs, %exp.ok]
  %isterm = icmp eq i8 %tc, %term
  br i1 %isterm, label %value, label %fail
value:
  %after = getelementptr i8, ptr %tq, i64 1
  %zero = icmp eq i64 %ew, 0
  br i1 %zero, label %signed.zero, label %nonzero
signed.zero:
  %z = select i1 %neg, double -0.0, double 0.0
  store double %z, ptr %dst, align 8
  ret ptr %after
nonzero:
  %p10 = sub i64 %texp, %efrac
  %wbig = icmp ugt i64 %ew, 9007199254740992
  %low = icmp slt i64 %p10, -22
  %high = icmp sgt i64 %p10, 22
  %out1 = or i1 %wbig, %low
  %out = or i1 %out1, %high
  br i1 %out, label %fail, label %exact
exact:
  %wf = uitofp i64 %ew to double
  %under = icmp slt i64 %p10, 0
  %pminus = sub i64 0, %p10
  %pa = select i1 %under, i64 %pminus, i64 %p10
  %pp = getelementptr [23 x double], ptr @p10, i64 0, i64 %pa
  %pw = load double, ptr %pp, align 8
  %times = fmul double %wf, %pw
  %over = fdiv double %wf, %pw
  %mag = select i1 %under, double %over, double %times
  %minus = fneg double %mag
  %v = select i1 %neg, double %minus, double %mag
  store double %v, ptr %dst, align 8
  ret ptr %after
fail:
  ret ptr null
}

; the common shapes inline: up to 8 integer digits, an optional point and 1-8 more, no
; exponent; anything else (and every refusal) through the out-of-line loops above
define internal ptr @float_field(ptr %s, i8 %term, ptr %dst) alwaysinline {
""" + _lead("n1", "int") + r"""int:
  %i1 = call i64 @value8(ptr %d0, i64 %n1)
  %q1 = getelementptr i8, ptr %d0, i64 %n1
  %c1 = load i8, ptr %q1, align 1
  %dot = icmp eq i8 %c1, 46
  br i1 %dot, label %frac, label %whole
whole:
  %ends1 = icmp eq i8 %c1, %term
  br i1 %ends1, label %value, label %slow
frac:
  %f1 = getelementptr i8, ptr %q1, i64 1
  %n2 = call i64 @digits(ptr %f1)
  %n2.m = add i64 %n2, -1
  %short2 = icmp ult i64 %n2.m, 8
  br i1 %short2, label %frac.value, label %slow
frac.value:
  %v2 = call i64 @value8(ptr %f1, i64 %n2)
  %scale.p = getelementptr [9 x i64], ptr @e10, i64 0, i64 %n2
  %scale = load i64, ptr %scale.p, align 8
  %i1s = mul i64 %i1, %scale
  %w2 = add i64 %i1s, %v2
  %q2 = getelementptr i8, ptr %f1, i64 %n2
  %c2 = load i8, ptr %q2, align 1
  %ends2 = icmp eq i8 %c2, %term
  %exact = icmp ule i64 %w2, 9007199254740992
  %ok2 = and i1 %ends2, %exact
  br i1 %ok2, label %value, label %slow
value:
  %w = phi i64 [%i1, %whole], [%w2, %frac.value]
  %n = phi i64 [0, %whole], [%n2, %frac.value]
  %q = phi ptr [%q1, %whole], [%q2, %frac.value]
  %wf = uitofp i64 %w to double
  %pp = getelementptr [23 x double], ptr @p10, i64 0, i64 %n
  %pw = load double, ptr %pp, align 8
  %mag = fdiv double %wf, %pw
  %minus = fneg double %mag
  %v = select i1 %neg, double %minus, double %mag
  store double %v, ptr %dst, align 8
  %after = getelementptr i8, ptr %q, i64 1
  ret ptr %after
slow:
  %r = call ptr @float_slow(ptr %s, i8 %term, ptr %dst)
  ret ptr %r
}

define internal ptr @int_field(ptr %s, i8 %term, ptr %dst) alwaysinline {
""" + _lead("n", "fast") + r"""fast:
  %v = call i64 @value8(ptr %d0, i64 %n)
  %q = getelementptr i8, ptr %d0, i64 %n
  %c = load i8, ptr %q, align 1
  %ends = icmp eq i8 %c, %term
  br i1 %ends, label %done, label %slow
""" + _INT_DONE + r"""slow:
  %r = call ptr @int_slow(ptr %s, i8 %term, ptr %dst)
  ret ptr %r
}

; a float32 only where rounding the double gives what rounding the decimal would: zero, or a
; normal float32 (2^-126 to FLT_MAX) that is not exactly halfway between two float32s
define internal i1 @to_float32(double %v, ptr %dst) alwaysinline {
  %bits = bitcast double %v to i64
  %abs = and i64 %bits, 9223372036854775807
  %zero = icmp eq i64 %abs, 0
  %small = icmp ult i64 %abs, 4039728865751334912
  %large = icmp ugt i64 %abs, 5183643170566569984
  %range.bad = or i1 %small, %large
  %range.ok = xor i1 %range.bad, true
  %low = and i64 %bits, 536870911
  %half = icmp eq i64 %low, 268435456
  %not.half = xor i1 %half, true
  %normal = and i1 %range.ok, %not.half
  %ok = or i1 %zero, %normal
  %f = fptrunc double %v to float
  store float %f, ptr %dst, align 4
  ret i1 %ok
}

define internal void @copy_text(ptr %s, i64 %n, ptr %dst) alwaysinline {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %copy]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %copy, label %done
copy:
  %sp = getelementptr i8, ptr %s, i64 %i
  %v = load <16 x i8>, ptr %sp, align 1
  %dp = getelementptr i8, ptr %dst, i64 %i
  store <16 x i8> %v, ptr %dp, align 1
  %i.next = add i64 %i, 16
  br label %loop
done:
  ret void
}

declare i64 @llvm.cttz.i64(i64, i1)
declare i64 @llvm.ctpop.i64(i64)

; the slow loops stay loops (unrolled, they cost compile time and are rarely run)
!0 = distinct !{!0, !4}
!1 = distinct !{!1, !4}
!2 = distinct !{!2, !4}
!3 = distinct !{!3, !4}
!4 = !{!"llvm.loop.unroll.disable"}
"""


WINDOW = 16384  # bytes a window's separators are found in before its rows are parsed
_UNROLLED = 12  # separator positions written per 64-byte block without a branch


def _splat(name: str, byte: int) -> list[str]:
    return [f"  %{name}.i = insertelement <64 x i8> poison, i8 {byte}, i64 0",
            f"  %{name} = shufflevector <64 x i8> %{name}.i, <64 x i8> poison, "
            "<64 x i32> zeroinitializer"]


def _scan() -> list[str]:
    """Pass 1: the offsets of the window's delimiters and newlines, 64 bytes at a time (so a
    field's parse never waits for the one before it to find its end); a quote or a carriage
    return anywhere fails the chunk."""
    out = [
        "scan:",
        "  %b = phi ptr [%ws, %window], [%b.next, %flat.done]",
        "  %k = phi i64 [0, %window], [%k.next, %flat.done]",
        "  %blk = load <64 x i8>, ptr %b, align 1",
        "  %isd = icmp eq <64 x i8> %blk, %D", "  %isn = icmp eq <64 x i8> %blk, %N",
        "  %isq = icmp eq <64 x i8> %blk, %Q", "  %isr = icmp eq <64 x i8> %blk, %R",
        "  %sepv = or <64 x i1> %isd, %isn", "  %badv = or <64 x i1> %isq, %isr",
        "  %sepm = bitcast <64 x i1> %sepv to i64", "  %badm = bitcast <64 x i1> %badv to i64",
        "  %anybad = icmp ne i64 %badm, 0",
        "  br i1 %anybad, label %fail, label %flatten",
        "flatten:",
        "  %bi = ptrtoint ptr %b to i64", "  %pi = ptrtoint ptr %p to i64",
        "  %base = sub i64 %bi, %pi",
        "  %m0 = add i64 %sepm, 0",
    ]
    for i in range(_UNROLLED):
        out += [f"  %t{i} = call i64 @llvm.cttz.i64(i64 %m{i}, i1 false)",
                f"  %pos{i}.64 = add i64 %base, %t{i}", f"  %pos{i} = trunc i64 %pos{i}.64 to i32",
                f"  %ki{i} = add i64 %k, {i}",
                f"  %slot{i} = getelementptr i32, ptr %seps, i64 %ki{i}",
                f"  store i32 %pos{i}, ptr %slot{i}, align 4",
                f"  %m{i}.less = add i64 %m{i}, -1", f"  %m{i + 1} = and i64 %m{i}, %m{i}.less"]
    out += [
        "  %cnt = call i64 @llvm.ctpop.i64(i64 %sepm)",
        f"  %over = icmp ugt i64 %cnt, {_UNROLLED}",
        "  br i1 %over, label %rest, label %flat.done",
        "rest:",
        f"  %rm = phi i64 [%m{_UNROLLED}, %flatten], [%rm.next, %rest]",
        f"  %rk = phi i64 [{_UNROLLED}, %flatten], [%rk.next, %rest]",
        "  %rt = call i64 @llvm.cttz.i64(i64 %rm, i1 true)",
        "  %rpos.64 = add i64 %base, %rt", "  %rpos = trunc i64 %rpos.64 to i32",
        "  %rki = add i64 %k, %rk", "  %rslot = getelementptr i32, ptr %seps, i64 %rki",
        "  store i32 %rpos, ptr %rslot, align 4",
        "  %rm.less = add i64 %rm, -1", "  %rm.next = and i64 %rm, %rm.less",
        "  %rk.next = add i64 %rk, 1",
        "  %rdone = icmp eq i64 %rm.next, 0",
        "  br i1 %rdone, label %flat.done, label %rest",
        "flat.done:",
        "  %k.next = add i64 %k, %cnt",
        "  %b.next = getelementptr i8, ptr %b, i64 64",
        "  %bn = ptrtoint ptr %b.next to i64", "  %wsi = ptrtoint ptr %ws to i64",
        "  %used = sub i64 %bn, %wsi",
        f"  %full = icmp uge i64 %used, {WINDOW}",
        "  %atend = icmp uge ptr %b.next, %end",
        "  %stop = or i1 %full, %atend",
        "  br i1 %stop, label %row, label %scan",
    ]
    return out


def _fields(kinds: tuple[str, ...], delim: int) -> tuple[list[str], list[str]]:
    """Pass 2, one row: each field between the separators pass 1 found; the IR lines that load
    the column pointers, and the row's lines."""
    load, body = [], []
    slot, last = 0, len(kinds) - 1
    for k, kind in enumerate(kinds):
        term = 10 if k == last else delim
        start = "%rs" if k == 0 else f"%e{k - 1}.1"
        body += [f"  %j{k} = add i64 %j, {k}",
                 f"  %e{k}.p = getelementptr i32, ptr %seps, i64 %j{k}",
                 f"  %e{k}.o = load i32, ptr %e{k}.p, align 4",
                 f"  %e{k}.z = zext i32 %e{k}.o to i64",
                 f"  %e{k} = getelementptr i8, ptr %p, i64 %e{k}.z",
                 f"  %e{k}.1 = getelementptr i8, ptr %e{k}, i64 1"]
        load += [f"  %o{k}.p = getelementptr i64, ptr %outs, i64 {slot}",
                 f"  %o{k} = load ptr, ptr %o{k}.p, align 8"]
        slot += 1
        if kind == "bin":
            load += [f"  %d{k}.p = getelementptr i64, ptr %outs, i64 {slot}",
                     f"  %d{k} = load ptr, ptr %d{k}.p, align 8",
                     f"  %at{k} = alloca i64, align 8", f"  store i64 0, ptr %at{k}, align 8"]
            slot += 1
            body += [f"  %c{k} = load i8, ptr %e{k}, align 1",
                     f"  %ok{k} = icmp eq i8 %c{k}, {term}",
                     f"  br i1 %ok{k}, label %copy{k}, label %fail",
                     f"copy{k}:",
                     f"  %si{k} = ptrtoint ptr {start} to i64",
                     f"  %ei{k} = ptrtoint ptr %e{k} to i64",
                     f"  %n{k} = sub i64 %ei{k}, %si{k}",
                     f"  %w{k} = load i64, ptr %at{k}, align 8",
                     f"  %wp{k} = getelementptr i8, ptr %d{k}, i64 %w{k}",
                     f"  call void @copy_text(ptr {start}, i64 %n{k}, ptr %wp{k})",
                     f"  %w{k}.next = add i64 %w{k}, %n{k}",
                     f"  store i64 %w{k}.next, ptr %at{k}, align 8",
                     f"  %w{k}.32 = trunc i64 %w{k}.next to i32",
                     f"  %op{k} = getelementptr i32, ptr %o{k}, i64 %r.next",
                     f"  store i32 %w{k}.32, ptr %op{k}, align 4",
                     f"  br label %end{k}", f"end{k}:"]
            continue
        if kind == "i64":
            body += [f"  %dst{k} = getelementptr i64, ptr %o{k}, i64 %r",
                     f"  %a{k} = call ptr @int_field(ptr {start}, i8 {term}, ptr %dst{k})",
                     f"  %ok{k} = icmp eq ptr %a{k}, %e{k}.1",
                     f"  br i1 %ok{k}, label %end{k}, label %fail", f"end{k}:"]
            continue
        body += [f"  %a{k} = call ptr @float_field(ptr {start}, i8 {term}, ptr %v)",
                 f"  %ok{k} = icmp eq ptr %a{k}, %e{k}.1",
                 f"  br i1 %ok{k}, label %got{k}, label %fail",
                 f"got{k}:", f"  %v{k} = load double, ptr %v, align 8"]
        if kind == "f64":
            body += [f"  %dst{k} = getelementptr double, ptr %o{k}, i64 %r",
                     f"  store double %v{k}, ptr %dst{k}, align 8", f"  br label %end{k}",
                     f"end{k}:"]
        else:
            body += [f"  %dst{k} = getelementptr float, ptr %o{k}, i64 %r",
                     f"  %f{k} = call i1 @to_float32(double %v{k}, ptr %dst{k})",
                     f"  br i1 %f{k}, label %end{k}, label %fail", f"end{k}:"]
    return load, body


@functools.lru_cache(maxsize=32)
def _ir(kinds: tuple[str, ...], delim: int, quote: int) -> str:
    """parse(p, len, outs): windows of about WINDOW bytes, each in two passes (`_scan`, then
    `_fields` row by row); a row cut by the window's end starts the next window."""
    load, body = _fields(kinds, delim)
    ncols, last = len(kinds), len(kinds) - 1
    return "\n".join([
        _HELPERS,
        "define i64 @parse(ptr %p, i64 %len, ptr %outs) {",
        "entry:",
        "  %end = getelementptr i8, ptr %p, i64 %len",
        f"  %seps = alloca [{WINDOW + 64 + _UNROLLED} x i32], align 64",
        "  %v = alloca double, align 8",
        *load,
        *_splat("D", delim), *_splat("N", 10), *_splat("Q", quote), *_splat("R", 13),
        "  br label %window",
        "window:",
        "  %ws = phi ptr [%p, %entry], [%rs, %window.end]",
        "  %r0 = phi i64 [0, %entry], [%r, %window.end]",
        "  %more = icmp ult ptr %ws, %end",
        "  br i1 %more, label %scan, label %exit",
        *_scan(),
        "row:",
        f"  %j = phi i64 [0, %flat.done], [%j.next, %end{last}]",
        f"  %rs = phi ptr [%ws, %flat.done], [%e{last}.1, %end{last}]",
        f"  %r = phi i64 [%r0, %flat.done], [%r.next, %end{last}]",
        f"  %jl = add i64 %j, {ncols}",
        "  %complete = icmp ule i64 %jl, %k.next",
        "  br i1 %complete, label %fields, label %window.end",
        "fields:",
        "  %r.next = add i64 %r, 1",
        *body,
        f"  %j.next = add i64 %j, {ncols}",
        "  br label %row",
        "window.end:",
        "  %none = icmp eq i64 %r, %r0",  # a row longer than the window, or cut short at the end
        "  br i1 %none, label %fail, label %window",
        "exit:",
        "  ret i64 %r0",
        "fail:",
        "  ret i64 -1",
        "}",
    ])
