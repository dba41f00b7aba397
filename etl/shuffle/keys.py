"""Shuffle keys and split assignment: a keyed hash of (seed, file identity, position).

Vectorised over whole blocks with NumPy uint64 arithmetic (SplitMix64's finaliser, a
bijection on 64-bit words), so a block of 64k records gets its keys in well under a
millisecond. The key depends only on the seed, the file's identity and the record's
position in it — never on runner, worker count or bundle splitting — so the permutation
and the bytes written are the same on every run.
"""

from __future__ import annotations

import hashlib

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SPLIT_SALT = np.uint64(0x5851F42D4C957F2D)
ID_POSITION_BITS = 40  # record id = file ordinal << 40 | position: 1T records per file


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (bijective): uniform 64-bit outputs for structured inputs."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def file_salt(seed: int, identity: str) -> np.uint64:
    """Keyed 64-bit hash of one input file's identity (its path relative to the inputs' root)."""
    digest = hashlib.blake2b(identity.encode(), digest_size=8, key=str(seed).encode()[:64]).digest()
    return np.uint64(int.from_bytes(digest, "little"))


def shuffle_keys(seed: int, identity: str, positions: np.ndarray) -> np.ndarray:
    """One uint64 key per record; distinct within a file (a composition of bijections)."""
    with np.errstate(over="ignore"):
        return mix64(mix64(positions.astype(np.uint64) + _GOLDEN) + file_salt(seed, identity))


def record_ids(file_ordinal: int, positions: np.ndarray) -> np.ndarray:
    """Input-order ids: unique per record, used as tie-break and as the key when not shuffling."""
    if positions.size and int(positions.max()) >= 1 << ID_POSITION_BITS:
        raise ValueError("a single input file holds more than 2**40 records")
    return (np.uint64(file_ordinal) << np.uint64(ID_POSITION_BITS)) | positions.astype(np.uint64)


def assign_splits(keys: np.ndarray, fractions: list[float]) -> np.ndarray:
    """Split index per record from an independent hash of its key (stable across reruns)."""
    u = (mix64(keys ^ _SPLIT_SALT) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    bounds = np.cumsum(np.asarray(fractions, np.float64))
    bounds[-1] = 1.0 + 1e-12
    return np.searchsorted(bounds, u, side="right").astype(np.int64)


def identities(paths: list[str]) -> dict[str, str]:
    """Each input path minus the inputs' common directory: moving a dataset keeps its keys."""
    parts = [p.split("/") for p in paths]
    common = 0
    if len(parts) > 1:
        for column in zip(*[p[:-1] for p in parts], strict=False):
            if len(set(column)) != 1:
                break
            common += 1
    elif parts:
        common = len(parts[0]) - 1
    return {p: "/".join(s[common:]) for p, s in zip(paths, parts, strict=True)}
