"""Deterministic benchmark inputs, generated in chunks and reused across runs.

- CSV: header `f0..f7,i0,i1,cat`; f* are float32 normals printed with '%.6g', i0 in
  [0, 1_000_000), i1 in [-1000, 1000), cat one of CATEGORIES. Matches schemas/bench_csv.yaml.
- IDX (MNIST-shaped): N 28x28 uint8 images (~20% non-zero pixels, like MNIST) and N uint8
  labels in gzip-compressed IDX files (`images-idx3-ubyte.gz`, `labels-idx1-ubyte.gz`;
  big-endian magic 0x00000803 / 0x00000801, dims as uint32 BE, gzip mtime 0). Matches
  schemas/bench_images.yaml.

Every chunk of CHUNK rows draws from its own RNG seeded with (SEED, chunk index), so the bytes
depend only on N and never more than one chunk is in memory. A dataset is written under a
temporary name and published with a `.done` marker; a later run with the same N reuses it.

    python -m benchmarks.data --rows 1000000 --images 600000 --workdir bench_out
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import struct
import sys
import time

import numpy as np

SEED = 20240611
CHUNK = 100_000
GENERATOR_VERSION = 1
CATEGORIES = ("alpha", "beta", "gamma", "delta", "epsilon")
FLOAT_COLUMNS = tuple(f"f{i}" for i in range(8))
CSV_HEADER = ",".join((*FLOAT_COLUMNS, "i0", "i1", "cat"))
IMAGE_SHAPE = (28, 28)
IMAGES_FILE = "images-idx3-ubyte.gz"
LABELS_FILE = "labels-idx1-ubyte.gz"
_ROW_FORMAT = ",".join(["%.6g"] * 8 + ["%d", "%d", "%s"]) + "\n"


def _rng(kind: str, chunk: int) -> np.random.Generator:
    salt = {"csv": 1, "images": 2}[kind]
    return np.random.default_rng([SEED, salt, chunk])


def _chunks(n: int):
    for index, start in enumerate(range(0, n, CHUNK)):
        yield index, min(CHUNK, n - start)


# ---- CSV ---------------------------------------------------------------------------------
def csv_chunk(index: int, rows: int) -> str:
    """The text of `rows` CSV lines of chunk `index` (no header)."""
    rng = _rng("csv", index)
    floats = rng.standard_normal((rows, 8), dtype=np.float32).astype(np.float64)
    i0 = rng.integers(0, 1_000_000, rows)
    i1 = rng.integers(-1000, 1000, rows)
    cat = rng.integers(0, len(CATEGORIES), rows)
    fmt = _ROW_FORMAT
    names = CATEGORIES
    return "".join(
        fmt % (*f, a, b, names[c])
        for f, a, b, c in zip(floats.tolist(), i0.tolist(), i1.tolist(), cat.tolist(),
                              strict=True)
    )


def write_csv(path: str, rows: int) -> None:
    with open(path, "w", encoding="ascii", newline="") as fh:
        fh.write(CSV_HEADER + "\n")
        for index, n in _chunks(rows):
            fh.write(csv_chunk(index, n))


def write_quoted_csv(path: str, rows: int) -> None:
    """The engine-stress input (issue 19's report): n, x = n/2, s a word, or every 7th row a
    quoted field with a newline and doubled quotes. ~32 bytes a row."""
    with open(path, "w", newline="") as fh:
        fh.write("n,x,s\n")
        for start in range(0, rows, CHUNK):
            fh.write("".join(
                f'{i},{i * 0.5},"line {i}\nsaid ""hi"" {i}"\n' if i % 7 == 0 else
                f"{i},{i * 0.5},word{i}\n" for i in range(start, min(rows, start + CHUNK))))


# ---- IDX ---------------------------------------------------------------------------------
def images_chunk(index: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 images [rows, 28, 28], uint8 labels [rows]) of chunk `index`."""
    rng = _rng("images", index)
    pixels = rng.integers(1, 256, (rows, *IMAGE_SHAPE), dtype=np.uint8)
    pixels[rng.random((rows, *IMAGE_SHAPE), dtype=np.float32) >= 0.2] = 0
    labels = rng.integers(0, 10, rows, dtype=np.uint8)
    return pixels, labels


def _idx_header(shape: tuple[int, ...]) -> bytes:
    """IDX header of a uint8 array: 0x00 0x00, type 0x08 (ubyte), ndim, dims as uint32 BE."""
    return struct.pack(">I", 0x0800 | len(shape)) + struct.pack(f">{len(shape)}I", *shape)


def _gzip_writer(path: str):
    raw = open(path, "wb")  # noqa: SIM115 - closed with the GzipFile below
    # filename='' and mtime=0: the bytes do not depend on the path or the clock.
    return raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0)


def _write_idx_streaming(images_path: str, labels_path: str, n: int) -> None:
    img_raw, img = _gzip_writer(images_path)
    lab_raw, lab = _gzip_writer(labels_path)
    try:
        img.write(_idx_header((n, *IMAGE_SHAPE)))
        lab.write(_idx_header((n,)))
        for index, rows in _chunks(n):
            pixels, labels = images_chunk(index, rows)
            img.write(pixels.tobytes())
            lab.write(labels.tobytes())
    finally:
        img.close()
        lab.close()
        img_raw.close()
        lab_raw.close()


def write_idx_pair(images_path: str, labels_path: str, n: int) -> None:
    """Write the image and label IDX files; uses etl.formats.idx.write_idx when the project has it."""
    try:
        from etl.formats.idx import write_idx  # noqa: PLC0415 - optional project helper
    except ImportError:
        write_idx = None
    if write_idx is None:
        _write_idx_streaming(images_path, labels_path, n)
        return
    images = np.empty((n, *IMAGE_SHAPE), dtype=np.uint8)
    labels = np.empty((n,), dtype=np.uint8)
    start = 0
    for index, rows in _chunks(n):
        images[start : start + rows], labels[start : start + rows] = images_chunk(index, rows)
        start += rows
    write_idx(images_path, images)
    write_idx(labels_path, labels)
    with open(images_path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b":  # the helper wrote plain IDX: fall back to ours
            _write_idx_streaming(images_path, labels_path, n)


def read_idx(path: str) -> np.ndarray:
    """Read a (gzip-compressed or plain) uint8 IDX file into a NumPy array."""
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    (magic,) = struct.unpack(">I", data[:4])
    if magic >> 8 != 0x08:
        raise ValueError(f"{path}: not a uint8 IDX file (magic {magic:#010x})")
    ndim = magic & 0xFF
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


# ---- reuse -------------------------------------------------------------------------------
def _ensure(directory: str, meta: dict, write) -> bool:
    """Generate into `directory` unless a matching `.done` marker exists; True if generated."""
    marker = os.path.join(directory, ".done")
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as fh:
            if json.load(fh) == meta:
                return False
    tmp = directory + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(tmp)
    write(tmp)
    with open(os.path.join(tmp, ".done"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh)
    os.replace(tmp, directory)
    return True


def ensure_csv(workdir: str, rows: int, log=print) -> str:
    """Path of the CSV with `rows` rows under workdir/data, generating it if needed."""
    directory = os.path.join(os.path.abspath(workdir), "data", f"csv-{rows}")
    meta = {"kind": "csv", "rows": rows, "seed": SEED, "version": GENERATOR_VERSION}
    t0 = time.perf_counter()
    if _ensure(directory, meta, lambda d: write_csv(os.path.join(d, "data.csv"), rows)):
        log(f"generated csv {rows} rows in {time.perf_counter() - t0:.1f}s -> {directory}")
    return os.path.join(directory, "data.csv")


def ensure_arrays(workdir: str, n: int, log=print) -> tuple[str, str]:
    """(x.npy, y.npy) with `n` rows: x float32 [n, 16] (uniform, seeded), y int64 0..n-1."""
    directory = os.path.join(os.path.abspath(workdir), "data", f"arrays-{n}")
    meta = {"kind": "arrays", "rows": n, "seed": SEED, "version": GENERATOR_VERSION}
    t0 = time.perf_counter()

    def write(d: str) -> None:
        rng = np.random.default_rng(SEED)
        x = np.lib.format.open_memmap(os.path.join(d, "x.npy"), "w+", np.float32, (n, 16))
        for start in range(0, n, 1 << 20):  # bounded memory at any n
            stop = min(n, start + (1 << 20))
            x[start:stop] = rng.random((stop - start, 16), dtype=np.float32)
        x.flush()
        del x
        np.save(os.path.join(d, "y.npy"), np.arange(n, dtype=np.int64))

    if _ensure(directory, meta, write):
        log(f"generated npy {n} rows in {time.perf_counter() - t0:.1f}s -> {directory}")
    return os.path.join(directory, "x.npy"), os.path.join(directory, "y.npy")


def ensure_images(workdir: str, n: int, log=print) -> tuple[str, str]:
    """(images path, labels path) of the IDX pair with `n` images, generating it if needed."""
    directory = os.path.join(os.path.abspath(workdir), "data", f"images-{n}")
    meta = {"kind": "images", "images": n, "seed": SEED, "version": GENERATOR_VERSION}
    t0 = time.perf_counter()

    def write(d: str) -> None:
        write_idx_pair(os.path.join(d, IMAGES_FILE), os.path.join(d, LABELS_FILE), n)

    if _ensure(directory, meta, write):
        log(f"generated idx {n} images in {time.perf_counter() - t0:.1f}s -> {directory}")
    return os.path.join(directory, IMAGES_FILE), os.path.join(directory, LABELS_FILE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=0, help="CSV rows (0: none)")
    parser.add_argument("--images", type=int, default=0, help="IDX images (0: none)")
    parser.add_argument("--workdir", default=os.path.join(os.path.dirname(__file__), "..",
                                                          "bench_out"))
    args = parser.parse_args(argv)
    if args.rows:
        print(ensure_csv(args.workdir, args.rows))
    if args.images:
        print(*ensure_images(args.workdir, args.images))
    return 0


if __name__ == "__main__":
    sys.exit(main())
