"""A JSON array file (`[ {...}, {...} ]`) read as records, streamed and bounded.

Many exports are one JSON array of objects, often pretty-printed over many lines (vega's
cars.json). The `jsonl` format reads them too: each element of the top-level array is one
record, its position the element's 0-based index, its line the 1-based line where the element
starts.

How, without a Python step per record: each chunk of the file is scanned with NumPy for the
array's structure (quotes not escaped by an odd run of backslashes toggle strings; `{[`/`}]`
outside strings move the depth; a `,` at depth 1 ends an element, the `]` back to depth 0 ends
the array). The state at a chunk's end (inside a string, a run of backslashes, the depth) carries
into the next. The elements of a block are then one contiguous run of bytes: their separators
become newlines and pyarrow.json (multi-line objects allowed) parses them in one call.

Bad elements: a block pyarrow refuses is parsed element by element with `json.loads`; an
element that is not valid JSON or not an object is one `invalid_json` record, an element that
is not UTF-8 a `not_utf8` one, an element over `max_record_bytes` an `oversized_record`
(skipped while it streams past). Exactness: when a bad element's brackets do not balance, where
the next elements start is unknown, so the file fails with a BadInputError naming its line
(never a silent merge of records); so does anything but whitespace after the array, or a file
that ends inside it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from etl.base.errors import BadInputError, BadRecord
from etl.sources.base import Block
from etl.sources.file_source import excerpt, utf8_bad_rows
from etl.storage import fs

_CHUNK = 1 << 22
_IS_WS = np.zeros(256, bool)
_IS_WS[[9, 10, 13, 32]] = True
_SPECIAL = np.zeros(256, bool)
_SPECIAL[[34, 92, 123, 125, 91, 93, 44]] = True  # " \ { } [ ] ,


def is_json_array(path: str, limit: int = 64 << 20) -> bool:
    """The first non-blank character is `[` and the first line is not, on its own, a JSON
    list of scalars (`[1, 2]` as the first line of a JSON Lines file is one bad record)."""
    with _open(path) as fh:
        head = fh.read(1 << 16)
        body = head.lstrip()
        if not body.startswith(b"["):
            return False
        first = body.split(b"\n", 1)[0]
        if b"\n" not in body:
            first += fh.readline(limit)
    try:
        value = json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return True
    return isinstance(value, list) and (not value or any(isinstance(v, dict) for v in value))


@contextlib.contextmanager
def _open(path: str) -> Iterator[Any]:
    with fs.open_read(path) as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw) as fh:
                yield fh
        else:
            yield raw


class _Scan:
    """The array's structure, chunk after chunk (see the module docstring)."""

    def __init__(self, path: str):
        self.path = path
        self.in_string = False
        self.backslashes = 0  # run of backslashes at the end of the last chunk
        self.depth = 0
        self.started = self.ended = False
        self.pos = np.zeros(0, np.int64)  # the last chunk's special bytes

    def chunk(self, u8: np.ndarray, line_of: Callable[[int], int]) -> np.ndarray:
        """Offsets (in `u8`) of the bytes that end an element: depth-1 commas and the array's
        closing bracket; the state moves to the chunk's end. Only the bytes that can matter
        (quotes, backslashes, brackets, commas) are looked at, as one sparse array."""
        n = len(u8)
        pos = self.pos = np.flatnonzero(_SPECIAL[u8])
        c = u8[pos]
        m = len(pos)
        idx = np.arange(m, dtype=np.int64)
        slash = c == 92
        contiguous = np.empty(m, bool)
        prev_slash = np.empty(m, bool)
        if m:
            contiguous[0], prev_slash[0] = pos[0] == 0, self.backslashes > 0
            contiguous[1:], prev_slash[1:] = pos[1:] == pos[:-1] + 1, slash[:-1]
        run_start = slash & ~(prev_slash & contiguous)
        start = np.maximum.accumulate(np.where(run_start, idx, -1)) if m else idx
        run = np.where(start >= 0, idx - start + 1, idx + 1 + self.backslashes)  # at slashes
        before = np.zeros(m, np.int64)  # backslashes right before each special byte
        if m:
            before[0] = self.backslashes if pos[0] == 0 else 0
            before[1:] = np.where(slash[:-1] & contiguous[1:], run[:-1], 0)
        quote = (c == 34) & (before % 2 == 0)
        flips = np.cumsum(quote, dtype=np.int64)
        inside = ((flips - quote) % 2 == 1) ^ self.in_string
        outside = ~inside & ~quote
        opens = outside & ((c == 123) | (c == 91))
        closes = outside & ((c == 125) | (c == 93))
        step = opens.astype(np.int64) - closes
        after = self.depth + np.cumsum(step)
        depth = after - step  # before each special byte
        self._outside_array(u8, pos, c, depth, after, inside, quote, line_of)
        ends = pos[((c == 44) & outside & (depth == 1)) | (closes & (depth == 1))]
        if len(ends) and after[-1] == 0 and (closes & (depth == 1)).any():
            self.ended = True
        if m:
            self.in_string = bool(inside[-1]) ^ bool(quote[-1])
            self.backslashes = int(run[-1]) if slash[-1] and pos[-1] == n - 1 else 0
            self.depth = int(after[-1])
        elif n:
            self.backslashes = 0
        return ends

    def _outside_array(self, u8: np.ndarray, pos: np.ndarray, c: np.ndarray, depth: np.ndarray,
                       after: np.ndarray, inside: np.ndarray, quote: np.ndarray,
                       line_of: Callable[[int], int]) -> None:
        """Anything but whitespace before the opening `[` or after the closing `]` fails the
        file; the first `[` starts the array."""
        junk = list(pos[(depth == 0) & ~inside])  # special bytes outside the array
        free = (after == 0) & ~(inside ^ quote)  # the gap after these is outside it
        gaps = [(int(pos[k]) + 1, int(pos[k + 1]) if k + 1 < len(pos) else len(u8))
                for k in np.flatnonzero(free).tolist()]
        if self.depth == 0 and not self.in_string:
            gaps.insert(0, (0, int(pos[0]) if len(pos) else len(u8)))
        for a, b in gaps:
            ink = np.flatnonzero(~_IS_WS[u8[a:b]])
            if len(ink):
                junk.append(a + int(ink[0]))
        if not junk:
            return
        junk.sort()
        if not self.started and u8[junk[0]] == 91:
            self.started = True
            junk = junk[1:]
        if junk:
            raise BadInputError(
                f"{self.path}:{int(line_of(int(junk[0])))}: the JSON array ends before this "
                f"line or something other than whitespace stands outside it; the file cannot "
                f"be read as records (is it one JSON array of objects?)")


@dataclass
class _Elements:
    """Elements waiting to fill a block: `data` holds each one followed by a newline (its
    separator replaced), element i is data[bounds[i]:bounds[i+1]]; an element over the size
    limit is one newline there, its size in `oversized` (else -1)."""

    data: bytes = b""
    bounds: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    oversized: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def count(self) -> int:
        return len(self.lines)

    def add(self, data: bytes, bounds: np.ndarray, lines: np.ndarray,
            oversized: np.ndarray) -> None:
        """Elements whose bounds start at 0 in `data`."""
        self.bounds = np.concatenate([self.bounds[:-1], bounds + len(self.data)])
        self.data += data
        self.lines = np.concatenate([self.lines, lines])
        self.oversized = np.concatenate([self.oversized, oversized])

    def take(self, n: int) -> _Elements:
        n = min(n, self.count)
        cut = int(self.bounds[n])
        head = _Elements(self.data[:cut], self.bounds[: n + 1], self.lines[:n],
                         self.oversized[:n])
        self.data, self.bounds = self.data[cut:], self.bounds[n:] - cut
        self.lines, self.oversized = self.lines[n:], self.oversized[n:]
        return head


def read_json_array(path: str, block_rows: int, limit: int,
                    parse: Callable[[bytes, int], pa.Table | None]) -> Iterator[Block]:
    """Blocks of the array's elements (see the module docstring); `parse(data, rows)` is the
    JSON Lines reader's pyarrow step (strings kept as text)."""
    scan = _Scan(path)
    waiting = _Elements()
    index = 0  # elements before `waiting`
    tail = b""  # bytes of the element still open at the end of the data so far
    tail_line = 0  # 1-based line of its first non-blank byte (0: none yet)
    skipped = -1  # bytes of an oversized element being skipped, else -1
    lines_before = 0  # newlines before the current chunk
    with _open(path) as fh:
        while True:
            chunk = fh.read(_CHUNK)
            u8 = np.frombuffer(chunk, np.uint8)
            newline_at = np.flatnonzero(u8 == 10)

            def line_of(i: Any, nl: np.ndarray = newline_at, base: int = lines_before) -> Any:
                return base + np.searchsorted(nl, i, side="right") + 1

            was_started = scan.started
            ends = scan.chunk(u8, line_of)
            ink = _Ink(u8, scan.pos)
            begin = 0
            if scan.started and not was_started:  # the elements start after the `[`
                begin = int(ink.first(np.zeros(1, np.int64), np.full(1, len(u8)))[0]) + 1
            if len(ends):
                if scan.ended and index + waiting.count == 0 and len(ends) == 1 and not (
                        tail.strip() or ink.first(np.array([begin]), ends)[0] < ends[0]):
                    begin = int(ends[0]) + 1  # `[]`: an empty array, no element
                else:
                    tail, tail_line, skipped = _complete(
                        waiting, chunk, ends, begin, ink, line_of, tail, tail_line,
                        skipped, limit)
                    begin = int(ends[-1]) + 1
            rest = chunk[begin:]  # the open element's bytes (after the array: its blanks)
            if not tail_line:
                at = int(ink.first(np.array([begin]), np.array([len(u8)]))[0])
                tail_line = int(line_of(at)) if at < len(u8) else 0
            if skipped >= 0:
                skipped += len(rest)
            else:
                tail += rest
                if len(tail) > limit:
                    skipped, tail = len(tail), b""
            lines_before += len(newline_at)
            while waiting.count >= block_rows:
                yield _block(path, waiting.take(block_rows), index, parse)
                index += block_rows
            if not chunk:
                break
    if not scan.ended or tail.strip():
        raise BadInputError(f"{path}: the file ends inside the JSON array (near line "
                            f"{lines_before + 1}): is it truncated, or do its brackets not "
                            f"balance?")
    if waiting.count:
        yield _block(path, waiting, index, parse)


class _Ink:
    """Where the first non-blank byte at or after an offset is, in one chunk: the first
    special byte after it (objects start with `{`) unless plain bytes come first (scalars)."""

    def __init__(self, u8: np.ndarray, pos: np.ndarray):
        self.u8, self.pos = u8, pos
        self.before = np.concatenate([[0], np.cumsum(~_IS_WS[u8], dtype=np.int64)])

    def first(self, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """Per [start, stop): the offset of its first non-blank byte, else `stop`."""
        k = np.searchsorted(self.pos, starts)
        special = self.pos[np.minimum(k, max(len(self.pos) - 1, 0))] if len(self.pos) else \
            np.full(len(starts), len(self.u8), np.int64)
        special = np.where(k < len(self.pos), special, len(self.u8))
        out = np.minimum(special, stops).astype(np.int64)
        plain = self.before[np.minimum(out, len(self.u8))] - self.before[starts] > 0
        for e in np.flatnonzero(plain).tolist():  # scalar elements: rare, one slice each
            a, b = int(starts[e]), int(out[e])
            out[e] = a + int(np.flatnonzero(~_IS_WS[self.u8[a:b]])[0])
        return out


def _complete(waiting: _Elements, chunk: bytes, ends: np.ndarray, begin: int, ink: _Ink,
              line_of: Callable[[Any], Any], tail: bytes, tail_line: int, skipped: int,
              limit: int) -> tuple[bytes, int, int]:
    """The elements `ends` completes in this chunk go to `waiting` in one piece of bytes (the
    first with the open element carried from earlier chunks); returns the fresh open state."""
    starts = np.concatenate([[begin], ends[:-1] + 1]).astype(np.int64)
    first_ink = ink.first(starts, ends)
    has_ink = first_ink < ends
    lines = np.where(has_ink, line_of(first_ink), line_of(ends)).astype(np.int64)
    if tail_line:
        lines[0] = tail_line
    body = np.frombuffer(chunk, np.uint8)[begin : int(ends[-1]) + 1].copy()
    body[ends - begin] = 10  # separators (and the closing bracket) become line ends
    sizes = ends - starts
    sizes[0] += len(tail)
    oversized = np.where(sizes > limit, sizes, -1).astype(np.int64)
    if skipped >= 0:
        oversized[0] = skipped + int(ends[0] - begin)
        tail = b""
    if (oversized >= 0).any():  # rare: such elements become blank (their size is kept)
        for k in np.flatnonzero(oversized >= 0).tolist():
            body[int(starts[k] - begin) : int(ends[k] - begin)] = 32
        if oversized[0] >= 0:
            tail = b""
    bounds = np.concatenate([[0], ends + 1 - begin + len(tail)]).astype(np.int64)
    waiting.add(tail + body.tobytes(), bounds, lines, oversized)
    return b"", 0, -1


def _block(path: str, elements: _Elements, index: int,
           parse: Callable[[bytes, int], pa.Table | None]) -> Block:
    """One block of elements: all of them through pyarrow in one call, else one by one."""
    n = elements.count
    big = elements.oversized >= 0
    bad = [BadRecord(path, "oversized_record",
                     f"array element of {int(elements.oversized[k])} bytes is over "
                     f"max_record_bytes; skipped unread", line=int(elements.lines[k]))
           for k in np.flatnonzero(big).tolist()]
    rows = np.flatnonzero(~big)
    blobs = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(elements.bounds), pa.py_buffer(elements.data)])
    valid = not utf8_bad_rows(blobs).any()
    table = parse(elements.data, len(rows)) if valid and len(rows) else None
    if table is not None:
        columns = {name: table.column(name).combine_chunks() for name in table.schema.names}
        return Block(columns=columns, positions=index + rows.astype(np.int64), source=path,
                     bad=bad, lines=elements.lines[rows])
    good, records, texts = [], [], []
    for i in rows.tolist():
        text = elements.data[elements.bounds[i] : elements.bounds[i + 1]]
        line = int(elements.lines[i])
        try:
            value = json.loads(text.decode("utf-8"))
        except UnicodeDecodeError:
            bad.append(BadRecord(path, "not_utf8", "not valid UTF-8 text", line=line,
                                 raw=excerpt(text.strip())))
            continue
        except json.JSONDecodeError as e:
            if not _balanced(text):
                raise BadInputError(
                    f"{path}:{line}: element {index + i} of the JSON array is not valid JSON "
                    f"({e.msg}) and its brackets do not balance, so where the next elements "
                    f"start is unknown; fix the file or convert it to JSON Lines") from None
            reason = f"invalid JSON: {e.msg}" if text.strip() else "invalid JSON: empty element"
            bad.append(BadRecord(path, "invalid_json", reason, line=line,
                                 raw=excerpt(text.strip())))
            continue
        if not isinstance(value, dict):
            bad.append(BadRecord(path, "invalid_json",
                                 f"expected a JSON object, got {type(value).__name__}",
                                 line=line, raw=excerpt(text.strip())))
            continue
        good.append(i)
        records.append(value)
        texts.append(text)
    table = parse(b"".join(texts), len(good)) if good else None
    if table is not None:
        columns: dict[str, Any] = {name: table.column(name).combine_chunks()
                                   for name in table.schema.names}
    else:
        names = list(dict.fromkeys(k for r in records for k in r))
        columns = {name: [r.get(name) for r in records] for name in names}
    return Block(columns=columns, positions=index + np.array(good, np.int64), source=path,
                 bad=sorted(bad, key=lambda b: b.line or 0),
                 lines=elements.lines[good] if good else np.zeros(0, np.int64))


def _balanced(text: bytes) -> bool:
    """Whether the brackets outside strings pair up ({} and [] nested right): then a bad
    element still ends where the scan says (only called for elements json.loads refuses)."""
    stack: list[int] = []
    pairs = {125: 123, 93: 91}
    inside = escaped = False
    for c in text:
        if inside:
            if escaped:
                escaped = False
            elif c == 92:
                escaped = True
            elif c == 34:
                inside = False
        elif c == 34:
            inside = True
        elif c in (123, 91):
            stack.append(c)
        elif c in pairs:
            if not stack or stack.pop() != pairs[c]:
                return False
    return not stack and not inside
