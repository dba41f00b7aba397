"""Split slicing (TFDS's grammar) and multi-host parts: which records of which shards to read.

Why here, without TensorFlow or Beam: `make_dataset` (tf.data), `open_records` (random
access, Grain, PyTorch) and `torch_dataset` must agree on exactly the same records for
`split="train[:10%]"` and for host 3 of 7; one plan, computed from the manifest's per-shard
record counts (`splits[split]["shards"][i]["num_records"]`), gives both.

The grammar is TFDS's (tensorflow_datasets/core/splits.py, 4.9): `name`, `name[a:b]` with
both bounds optional, each an integer (records), a percentage (`10%`, `-5%`, `33.3%`) or a
shard number (`2shard`; `name[3shard]` is shard 3 alone), and `+` joining parts in order.
Whitespace anywhere is ignored. As in TFDS: the unit of the first bound that has one applies
to both (`train[10%:20]` is `train[10%:20%]`); percentages round to the closest record,
`round(p * n / 100)` with Python's round (half to even), TFDS's default `rounding="closest"`;
a percentage outside [-100, 100] and an absolute bound beyond the split's size are errors
(TFDS does not clamp them); a negative bound counts from the end; `from > to` is empty.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from etl.base.errors import EtlError
from etl.output.layout import MANIFEST

_PART = re.compile(r"^(?P<name>[\w.-]+)(\[(?P<selector>[^\[\]]*)\])?$")
_BOUND = re.compile(r"^((?P<val>-?[\d_.]+)(?P<unit>%|shard)?)?$")
_HELP = "TFDS's syntax: train, train[:10%], train[10%:], train[:1000], train[-5%:], train+test"


class SplitError(EtlError, ValueError):
    """A split spec that does not parse or does not fit the output (one line, naming it)."""


@dataclass(frozen=True)
class Slice:
    """One `+`-part of a spec, as written: bounds None when left out."""

    split: str
    start: float | int | None
    stop: float | int | None
    unit: str  # "abs", "%" or "shard"


@dataclass(frozen=True)
class Piece:
    """Records [first, stop) of shard `shard` (its position in the split's shard list) of
    `split`; `shard_records` is that shard's size (a piece is whole when it spans it)."""

    split: str
    shard: int
    first: int
    stop: int
    shard_records: int

    @property
    def size(self) -> int:
        return self.stop - self.first

    @property
    def whole(self) -> bool:
        return self.first == 0 and self.stop == self.shard_records


def parse(spec: str) -> list[Slice]:
    """`spec` split into its `+`-parts; SplitError naming the text when it does not parse."""
    if not isinstance(spec, str):
        raise SplitError(f"split must be a string like 'train' or 'train[:10%]', got "
                         f"{type(spec).__name__}")
    text = re.sub(r"\s+", "", spec)
    if not text:
        raise SplitError(f"split {spec!r} is empty; {_HELP}")
    return [_part(p, spec) for p in text.split("+")]


def _part(text: str, spec: str) -> Slice:
    bad = f"split {spec!r}: cannot read {text!r}; {_HELP}"
    m = _PART.match(text)
    if not m:
        raise SplitError(bad)
    name, selector = m["name"], m["selector"]
    if selector is None:
        return Slice(name, None, None, "abs")
    bounds = [_BOUND.match(b) for b in selector.split(":")]
    if len(bounds) > 2 or not all(bounds) or not any(b[0] for b in bounds if b):
        raise SplitError(bad)
    if len(bounds) == 1:  # name[3shard]: one shard; TFDS allows no other single index
        (b,) = bounds
        if b["unit"] != "shard":
            raise SplitError(f"split {spec!r}: {text!r} names one position; only shards can be "
                             f"named alone ({name}[3shard]); slices are written {name}[a:b]")
        first = _number(b["val"], "shard", bad)
        return Slice(name, first, int(first) + 1, "shard")
    lo, hi = bounds
    unit = (lo["unit"] if lo else None) or (hi["unit"] if hi else None) or "abs"
    start = _number(lo["val"], unit, bad) if lo and lo["val"] else None
    stop = _number(hi["val"], unit, bad) if hi and hi["val"] else None
    if unit == "%" and any(v is not None and abs(v) > 100 for v in (start, stop)):
        raise SplitError(f"split {spec!r}: percentages must be within [-100%, 100%]")
    return Slice(name, start, stop, unit)


def _number(val: str, unit: str, bad: str) -> float | int:
    try:
        return float(val) if unit == "%" else int(val)
    except ValueError:
        raise SplitError(bad) from None


def absolute(part: Slice, shard_counts: Sequence[int], spec: str = "") -> tuple[int, int]:
    """[first, stop) of the split's records that `part` selects (TFDS's `_rel_to_abs_instr`
    with rounding 'closest')."""
    n = sum(shard_counts)
    start, stop = part.start, part.stop
    if part.unit == "%":
        first = 0 if start is None else int(round(start * n / 100.0))
        last = n if stop is None else int(round(stop * n / 100.0))
    elif part.unit == "shard":
        k = len(shard_counts)
        if any(v is not None and not -k <= int(v) <= k for v in (start, stop)):
            raise SplitError(f"split {spec or part.split!r}: shard bound out of range: "
                             f"{part.split!r} has {k} shards")
        first = 0 if start is None else sum(shard_counts[:int(start)])
        if stop is not None and stop <= 0:
            stop = k + int(stop)
        last = n if stop is None else sum(shard_counts[:int(stop)])
    else:
        first = 0 if start is None else int(start)
        last = n if stop is None else int(stop)
    if abs(first) > n or abs(last) > n:
        raise SplitError(f"split {spec or part.split!r}: slice [{first}:{last}] out of range: "
                         f"{part.split!r} has {n} records")
    first = n + first if first < 0 else first
    last = n + last if last < 0 else last
    return first, max(first, last)


def plan(spec: str, shard_counts: Mapping[str, Sequence[int]]) -> list[Piece]:
    """The pieces `spec` reads, in order: each part's [first, stop) cut at the shard
    boundaries. `shard_counts` maps every split name to its shards' record counts."""
    pieces: list[Piece] = []
    for part in parse(spec):
        if part.split not in shard_counts:
            of = f" (in {spec!r})" if spec.strip() != part.split else ""
            raise SplitError(f"split {part.split!r}{of} not in {MANIFEST}; available splits: "
                             f"{sorted(shard_counts)}")
        counts = list(shard_counts[part.split])
        first, stop = absolute(part, counts, spec)
        pieces.extend(_cut(part.split, counts, first, stop))
    return pieces


def _cut(split: str, counts: Sequence[int], first: int, stop: int) -> list[Piece]:
    out = []
    base = 0
    for s, n in enumerate(counts):
        lo, hi = max(first, base), min(stop, base + n)
        if lo < hi or (n == 0 and first <= base < stop):
            out.append(Piece(split, s, lo - base, hi - base, n))
        base += n
    return out


def host_part(pieces: Sequence[Piece], index: int, count: int, what: str = "") -> list[Piece]:
    """Host `index` of `count`'s pieces: every record exactly once over the hosts.

    Whole shards when every piece is a whole shard and `count` divides their number (host i
    reads shards i, i+count, ...: per-host counts differ by what the shard sizes differ);
    else contiguous record ranges, [i*N//count, (i+1)*N//count) of the N records in plan
    order (per-host counts differ by at most one)."""
    check_host(index, count)
    total = sum(p.size for p in pieces)
    if count > total:
        raise SplitError(f"{what or 'the split'}: {count} hosts but {total} records; each host "
                         f"needs at least one (use at most {total} hosts)")
    if count == 1:
        return list(pieces)
    if pieces and all(p.whole for p in pieces) and len(pieces) % count == 0:
        return list(pieces[index::count])
    lo, hi = index * total // count, (index + 1) * total // count
    out: list[Piece] = []
    base = 0
    for p in pieces:
        a, b = max(lo, base), min(hi, base + p.size)
        if a < b:
            out.append(Piece(p.split, p.shard, p.first + a - base, p.first + b - base,
                             p.shard_records))
        base += p.size
    return out


def check_host(index: int, count: int) -> None:
    """SplitError unless 0 <= index < count (ints)."""
    ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (index, count))
    if not ok or count < 1 or not 0 <= index < count:
        raise SplitError(f"shard=(index, count) needs 0 <= index < count, got ({index!r}, "
                         f"{count!r})")


def split_names(spec: str) -> list[str]:
    """The distinct split names `spec` reads, in order of appearance."""
    return list(dict.fromkeys(p.split for p in parse(spec)))
