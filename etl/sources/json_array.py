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
from typing import Any

import numpy as np
import pyarrow as pa

from etl.base.errors import BadInputError, BadRecord
from etl.sources.base import Block
from etl.sources.files import excerpt, utf8_bad_rows
from etl.storage import fs

_CHUNK = 1 << 22
_WS = np.array([9, 10, 13, 32], np.uint8)


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

    def chunk(self, u8: np.ndarray, line_of: Callable[[int], int]) -> np.ndarray:
        """Offsets (in `u8`) of the bytes that end an element: depth-1 commas and the array's
        closing bracket; the state moves to the chunk's end."""
        n = len(u8)
        if not n:
            return np.zeros(0, np.int64)
        at = np.arange(n, dtype=np.int64)
        slash = u8 == 92
        last_other = np.maximum.accumulate(np.where(slash, -1, at))
        before = np.concatenate([[-1], last_other[:-1]])
        run = at - 1 - before + np.where(before < 0, self.backslashes, 0)
        quote = (u8 == 34) & (run % 2 == 0)
        flips = np.cumsum(quote, dtype=np.int64)
        inside = (flips - quote) % 2 == 1
        if self.in_string:
            inside = ~inside
        outside = ~inside & ~quote
        opens = outside & ((u8 == 123) | (u8 == 91))
        closes = outside & ((u8 == 125) | (u8 == 93))
        step = opens.astype(np.int64) - closes
        after = self.depth + np.cumsum(step)
        depth = after - step  # before each byte
        top = (depth == 0) & ~inside & ~np.isin(u8, _WS)  # bytes outside the array
        if top.any():
            junk = np.flatnonzero(top)
            if not self.started and u8[junk[0]] == 91:
                self.started, junk = True, junk[1:]
            if len(junk):
                raise BadInputError(
                    f"{self.path}:{int(line_of(int(junk[0])))}: the JSON array ends before this "
                    f"line or something other than whitespace stands outside it; the file "
                    f"cannot be read as records (is it one JSON array of objects?)")
        ends = np.flatnonzero(((u8 == 44) & outside & (depth == 1)) | (closes & (depth == 1)))
        if len(ends) and closes[ends[-1]] and after[ends[-1]] == 0:
            self.ended = True
        self.in_string = bool(inside[-1]) ^ bool(quote[-1])
        self.backslashes = int(run[-1] + 1) if slash[-1] else 0
        self.depth = int(after[-1])
        return ends


def read_json_array(path: str, block_rows: int, limit: int,
                    parse: Callable[[bytes, int], pa.Table | None]) -> Iterator[Block]:
    """Blocks of the array's elements (see the module docstring); `parse(data, rows)` is the
    JSON Lines reader's pyarrow step (strings kept as text)."""
    scan = _Scan(path)
    elements: list[tuple[bytes, int]] = []  # (element bytes, its 1-based line), waiting
    waiting_bad: list[BadRecord] = []
    index = 0  # elements before `elements`
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
            begin = 0
            if scan.started and not was_started:  # the element run starts after the `[`
                begin = int(np.flatnonzero(~np.isin(u8, _WS))[0]) + 1
            starts = np.concatenate([[begin], ends + 1]).astype(np.int64)
            ink = np.flatnonzero(~np.isin(u8, _WS))
            first_ink = ink[np.minimum(np.searchsorted(ink, starts), max(len(ink) - 1, 0))] \
                if len(ink) else np.full(len(starts), len(u8), np.int64)
            stops = np.append(ends, len(u8))
            has_ink = (first_ink >= starts) & (first_ink < stops)
            ink_lines = line_of(first_ink).tolist()
            end_lines = line_of(stops).tolist()
            for k, (a, b) in enumerate(zip(starts.tolist(), stops.tolist(), strict=True)):
                if not tail_line and has_ink[k]:
                    tail_line = int(ink_lines[k])
                if skipped >= 0:
                    skipped += b - a
                else:
                    tail += chunk[a:b]
                    if len(tail) > limit:
                        skipped, tail = len(tail), b""
                if k == len(ends):  # the data's end, not an element's
                    break
                line = tail_line or int(end_lines[k])
                if skipped >= 0:
                    waiting_bad.append(BadRecord(
                        path, "oversized_record",
                        f"array element of {skipped} bytes is over max_record_bytes ({limit}); "
                        f"skipped unread", line=line, record=index + len(elements)))
                    elements.append((b"", line))
                    skipped = -1
                elif not (scan.ended and k == len(ends) - 1 and index + len(elements) == 0
                          and not tail.strip()):  # `[]` is an empty array, no element
                    elements.append((tail, line))
                tail, tail_line = b"", 0
            lines_before += len(newline_at)
            while len(elements) >= block_rows:
                yield _block(path, elements[:block_rows], index, waiting_bad, parse)
                index += block_rows
                elements, waiting_bad = elements[block_rows:], []
            if not chunk:
                break
    if not scan.ended or tail.strip():
        raise BadInputError(f"{path}: the file ends inside the JSON array (near line "
                            f"{lines_before + 1}): is it truncated, or do its brackets not "
                            f"balance?")
    if elements or waiting_bad:
        yield _block(path, elements, index, waiting_bad, parse)


def _block(path: str, elements: list[tuple[bytes, int]], index: int, bad: list[BadRecord],
           parse: Callable[[bytes, int], pa.Table | None]) -> Block:
    """One block of elements: all of them through pyarrow in one call, else one by one."""
    skipped = {b.record for b in bad}
    rows = [i for i in range(len(elements)) if index + i not in skipped]
    lines = np.array([elements[i][1] for i in range(len(elements))], np.int64)
    texts = [elements[i][0] for i in rows]
    data = b"".join(t + b"\n" for t in texts)
    offsets = np.concatenate([[0], np.cumsum([len(t) + 1 for t in texts])]).astype(np.int64)
    blobs = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(texts),
                                             [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    valid = not utf8_bad_rows(blobs).any()
    table = parse(data, len(rows)) if valid and rows else None
    positions = index + np.array(rows, np.int64)
    if table is not None:
        columns = {n: table.column(n).combine_chunks() for n in table.schema.names}
        return Block(columns=columns, positions=positions, source=path, bad=list(bad),
                     lines=lines[rows] if rows else np.zeros(0, np.int64))
    good, records = [], []
    bad = list(bad)
    for i in rows:
        text, line = elements[i]
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
    texts = [elements[i][0] for i in good]
    table = parse(b"\n".join(texts), len(good)) if good else None
    if table is not None:
        columns: dict[str, Any] = {n: table.column(n).combine_chunks() for n in table.schema.names}
    else:
        names = list(dict.fromkeys(k for r in records for k in r))
        columns = {n: [r.get(n) for r in records] for n in names}
    return Block(columns=columns, positions=index + np.array(good, np.int64), source=path,
                 bad=sorted(bad, key=lambda b: b.line or 0),
                 lines=lines[good] if good else np.zeros(0, np.int64))


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
