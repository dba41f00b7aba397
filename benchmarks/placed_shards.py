"""An experiment, not the pipeline (issue 29, goal 2): what the images job would cost if each
record were written straight to its final place in its shard while the input is read.

A global shuffle cannot finish a shard before the last record is read, so our `files`
strategy writes every run to a spill and builds the shards after the read (stage 2: about
0.5 s of the images job, most of it the 503 MB going to the disk). Where the input's record
count and every record's size are known before reading, as for IDX images of one shape and
labels of one varint length, each record's place is known too: its rank in the (key, id)
order decides its shard and its slot (etl.shuffle.planning's exact rank ranges), and every
frame has the same size. This script does that, outside Beam, for the benchmark's images job:

- ranks of all N records from their keys (etl.shuffle.placement.split_orders, as the
  pipeline computes them);
- the IDX source's blocks read and encoded by the pipeline's own threads (prefetch,
  ordered_map, Encoder, frame_records), each block's frames scattered into the shards' shared
  memory maps (one NumPy assignment per shard and block);
- at the end: each shard synced to the disk, its sha256, its index file.

It prints the phases and checks every shard's sha256 against a manifest the pipeline wrote
for the same job (`--manifest`): the bytes must be the same.

    python -m benchmarks.placed_shards --images 600000 --workdir W [--manifest OUT/manifest.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

from benchmarks.data import ensure_images
from etl.base import heap
from etl.contract.codec import Encoder
from etl.contract.schema import schema_from_dict
from etl.formats.proto_wire import binary_column, data_of, offsets_of
from etl.formats.record_index import FRAME_OVERHEAD, index_lines
from etl.formats.tfrecord import frame_records
from etl.job.read_plan import WHOLE_FILE, ReadTask
from etl.shuffle import keys
from etl.shuffle.placement import InputFile, split_orders
from etl.sources import make_reader
from transforms.prefetch import ordered_map, prefetch

SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "bench_images.yaml"


def place(workdir: str, images: int, shards: int, seed: int, out: str,
          memory: bool) -> dict[str, object]:
    image_path, label_path = ensure_images(workdir, images)
    t0 = time.perf_counter()
    schema = schema_from_dict(yaml.safe_load(SCHEMA.read_text()))
    encoder = Encoder(schema)
    reader = make_reader({"format": "idx", "paths": {"image": image_path, "label": label_path}},
                         ".", "sources.train")
    reader.prepare(schema, encoder.max_record_bytes)
    (split,) = reader.splits(image_path, WHOLE_FILE)
    identity = keys.identities([image_path])[image_path]
    task = ReadTask("train", image_path, identity, 0, split)

    # every record's shard and slot, from its rank in the (key, id) order (the pipeline's)
    n = images
    rank = split_orders([InputFile("train", identity, 0, n)], seed, {})["train"][2][0]
    starts = np.array([i * n // shards for i in range(shards + 1)], np.int64)
    shard_of = (np.searchsorted(starts, rank, side="right") - 1).astype(np.int32)
    slot_of = rank - starts[shard_of]
    t_planned = time.perf_counter()

    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    frame: list[int] = []
    files: list[tuple[int, mmap.mmap | None, np.ndarray | None]] = [(0, None, None)] * shards

    def open_shards(size: int) -> None:
        for s in range(shards):
            path = os.path.join(out, f"train-{s:05d}-of-{shards:05d}.tfrecord")
            count = int(starts[s + 1] - starts[s])
            if memory:  # anonymous pages, written with O_DIRECT at the end
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
                mm = mmap.mmap(-1, -(-count * size // 4096) * 4096,
                               flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            else:  # the shard file's own pages (page cache), synced at the end
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                os.ftruncate(fd, count * size)
                mm = mmap.mmap(fd, count * size)
            files[s] = (fd, mm, np.frombuffer(mm, np.uint8, count * size).reshape(count, size))

    def work(block) -> int:  # noqa: ANN001 - a reader's Block
        encoded = encoder.encode(block.columns, source=task.path, positions=block.positions,
                                 lines=block.lines, offsets=block.offsets)
        if encoded.bad or len(encoded.rows) != block.num_rows:
            raise SystemExit("a rejected record: this experiment needs every record written")
        framed = frame_records(binary_column(encoded.array))
        sizes = np.diff(offsets_of(framed))
        if not frame:
            frame.append(int(sizes[0]))
            open_shards(frame[0])
        if (sizes != frame[0]).any():
            raise SystemExit("records of different sizes: no fixed slot per record")
        data = np.frombuffer(data_of(framed), np.uint8).reshape(len(sizes), frame[0])
        at = np.asarray(block.positions)[encoded.rows]
        dest_shard, dest_slot = shard_of[at], slot_of[at]
        by_shard = np.argsort(dest_shard, kind="stable")
        cuts = np.searchsorted(dest_shard[by_shard], np.arange(shards + 1))
        for s in range(shards):
            rows = by_shard[cuts[s]:cuts[s + 1]]
            files[s][2][dest_slot[rows]] = data[rows]  # type: ignore[index]
        return len(sizes)

    marks: dict[str, float] = {}
    written = 0
    for done in ordered_map(work, prefetch(reader.read_split(split))):
        marks.setdefault("first block placed", time.perf_counter())
        written += done
    t_read = time.perf_counter()
    if written != n:
        raise SystemExit(f"placed {written} of {n} records")

    def finish(s: int) -> tuple[str, str]:
        fd, mm, _ = files[s]
        assert mm is not None
        count = int(starts[s + 1] - starts[s])
        if memory:
            with ThreadPoolExecutor(1) as hasher:
                hashed = hasher.submit(lambda: hashlib.sha256(memoryview(mm)[:count * frame[0]]).hexdigest())
                view = memoryview(mm)
                done = 0
                while done < len(mm):
                    done += os.write(fd, view[done:done + (8 << 20)])
                view.release()
                os.ftruncate(fd, count * frame[0])
                os.fsync(fd)
                sha = hashed.result()
        else:
            mm.flush()  # msync: the shard's pages to the disk
            os.fsync(fd)
            sha = hashlib.sha256(mm).hexdigest()
        one, _ = index_lines(np.full(count, frame[0] - FRAME_OVERHEAD))
        index = os.path.join(out, f"train-{s:05d}-of-{shards:05d}.tfrecord.index")
        with open(index, "wb") as fh:
            fh.write(one)
            os.fsync(fh.fileno())
        files[s] = (fd, None, None)
        mm.close()
        os.close(fd)
        return sha, hashlib.sha256(one).hexdigest()

    with ThreadPoolExecutor(2) as pool:
        shas = list(pool.map(finish, range(shards)))
    t_end = time.perf_counter()
    return {"records": written, "frame_bytes": frame[0],
            "planned_s": round(t_planned - t0, 3),
            "first_block_placed_s": round(marks["first block placed"] - t0, 3),
            "all_placed_s": round(t_read - t0, 3),
            "durable_hashed_indexed_s": round(t_end - t0, 3),
            "last_block_to_end_s": round(t_end - t_read, 3),
            "shards": shas}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.placed_shards",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=600_000)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--workdir", default="bench_out")
    p.add_argument("--memory", action="store_true",
                   help="place into anonymous memory, written with O_DIRECT at the end")
    p.add_argument("--manifest", help="a manifest.json the pipeline wrote for the same job")
    args = p.parse_args(argv)
    heap.keep_freed_memory()  # as the pipeline's DoFns do
    out = os.path.join(args.workdir, "placed")
    wall, cpu = time.perf_counter(), time.process_time()
    result = place(args.workdir, args.images, args.shards, args.seed, out, args.memory)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    shas = result.pop("shards")
    print(json.dumps({**result, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}))
    if args.manifest:
        entries = json.loads(Path(args.manifest).read_text())["splits"]["train"]["shards"]
        expected = [(e["sha256"], e["index"]["sha256"]) for e in entries]
        same = expected == shas
        print("same bytes as the pipeline's shards and index files:", same)
        if not same:
            return 1
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
