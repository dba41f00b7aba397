"""The records of one shard in (key, id) order, merged from its sorted slices in bounded memory.

Every slice (one run's records in the shard's key range) is already sorted, so a shard is a
k-way merge. It is done in rounds, vectorised: each slice contributes a block of its next
records (keys and ids only), the blocks are sorted together, and everything up to the
*frontier* is emitted: the smallest last-loaded (key, id) of the slices that still have
records not loaded yet, since nothing after it can come before it. Every slice whose block
is half used or less is topped up to a whole one before each round, so every round emits
about half the budget and a shard takes about 2 x records / budget rounds, however many
slices it merges (one that only reloaded used-up blocks emitted one slice's block per round:
rounds grew with the slice count, and the cost with records x runs, i.e. with the square of
the input; figures in benchmarks/README.md). Memory is the blocks (`budget` records in all,
24 bytes each) and one emitted batch, whatever the shard's size; each slice's block is
proportional to its length, so blocks cover about the same key range.

Ranks are counted as records are emitted, so the shard's plan (skip the first `skip`, keep
the next `take`) is applied on the fly. (key, id) is unique per record, so any correct merge
gives one order: the bytes do not depend on the budget or on how runs were cut.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from etl.shuffle.runs import RunSlice, sort_block

MERGE_RECORDS = 1 << 18  # records whose key, id and size are held for the merge (6 MiB)


Batch = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # source, index, id, size


def merged_batches(slices: Sequence[RunSlice], skip: int, take: int,
                   budget: int = MERGE_RECORDS) -> Iterator[Batch]:
    """(source slice, record index in it, id, framed size) of the records of ranks
    [skip, skip + take) of the merged order, in that order, in batches of at most `budget`."""
    lengths = [len(s) for s in slices]
    total = sum(lengths)
    if not total or not take:
        return
    block = [max(1, -(-n * budget // total)) for n in lengths]
    loaded = [0] * len(slices)  # records of slice i read so far
    keys: list[np.ndarray] = [np.zeros(0, np.uint64)] * len(slices)  # read, not yet emitted
    ids: list[np.ndarray] = [np.zeros(0, np.uint64)] * len(slices)
    sizes: list[np.ndarray] = [np.zeros(0, np.int64)] * len(slices)
    rank = 0
    end = skip + take
    while rank < end:
        for i, s in enumerate(slices):
            held = len(keys[i])
            if held * 2 <= block[i] and loaded[i] < lengths[i]:  # top up to a whole block
                hi = min(lengths[i], loaded[i] + block[i] - held)
                more_keys, more_ids, offsets = s.index(loaded[i], hi)
                keys[i] = np.concatenate([keys[i], more_keys]) if held else more_keys
                ids[i] = np.concatenate([ids[i], more_ids]) if held else more_ids
                sizes[i] = (np.concatenate([sizes[i], np.diff(offsets)]) if held
                            else np.diff(offsets))
                loaded[i] = hi
        live = [i for i in range(len(slices)) if len(keys[i])]
        if not live:
            break
        k = np.concatenate([keys[i] for i in live])
        d = np.concatenate([ids[i] for i in live])
        counts = [len(keys[i]) for i in live]
        src = np.repeat(np.asarray(live), counts)
        local = np.concatenate([np.arange(loaded[i] - n, loaded[i])
                                for i, n in zip(live, counts, strict=True)])
        z = np.concatenate([sizes[i] for i in live])
        order = sort_block(k, d, runs=len(live))  # (key, id) only where keys tie
        pending = [i for i in live if loaded[i] < lengths[i]]
        if pending:  # everything up to the smallest last-loaded (key, id) of those is final
            fk, fi = min((int(keys[i][-1]), int(ids[i][-1])) for i in pending)
            # how many are at or before it: counted on the unsorted keys, no gather needed
            cut = int(np.count_nonzero(k < np.uint64(fk)))
            if (tied := k == np.uint64(fk)).any():
                cut += int(np.count_nonzero(d[tied] <= np.uint64(fi)))
            order = order[:cut]
            if not cut:  # the frontier record itself is always at or before it
                raise RuntimeError("merge: a round emitted no record (a slice is not sorted)")
        emitted = np.bincount(src[order], minlength=len(slices)) if len(order) else None
        lo, hi = max(skip - rank, 0), min(end - rank, len(order))
        if hi > lo:
            kept = order[lo:hi]
            yield src[kept], local[kept], d[kept], z[kept]
        rank += len(order)
        if emitted is not None:
            for i in live:  # each slice's emitted records are a prefix of its block
                e = emitted[i]
                keys[i], ids[i], sizes[i] = keys[i][e:], ids[i][e:], sizes[i][e:]
