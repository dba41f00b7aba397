"""Plug-ins, not strings (issue 32 point 2): a third shard format is one adapter in the table
of etl.formats.shards and a third shuffle strategy one module plus its Beam steps in the
tables of etl.shuffle and transforms.shuffles; nothing else changes (docs/architecture.md,
"Adding a shard format or a shuffle strategy"). A toy format that writes length-prefixed
records and a toy strategy that hands each shard every run through a side input are
registered here and used the way a user would: the job file names them, the conversion
writes them, verify and inspect read the shards back through the table."""

from __future__ import annotations

import hashlib
import json
import pickle
import struct
import types
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pytest

from etl.base.errors import ConfigError, VerifyError
from etl.formats import shards
from etl.formats.shard_adapter import IndexFile, OpenAttempt, ShardAdapter, ShardSink
from etl.formats.shards import ShardFormat, adapter_of, format_problem, read_shard
from etl.formats.tfrecord import FOOTER, HEADER
from etl.job.config import job_from_dict
from etl.storage import fs
from tests.helpers import IDS_SCHEMA

SUFFIX = ".lpr"


class LengthPrefixed(ShardAdapter):
    """Each record as a little-endian uint32 length, then its bytes; no compression, no
    index files; read in order only."""

    name = "lpr"
    pattern = f"*{SUFFIX}"
    compression_refused = "a toy format"
    index_refused = "a toy format"

    def suffix(self, compression: str) -> str:
        return SUFFIX

    def open_sink(self, final: str, compression: str, index: bool, attempt: OpenAttempt,
                  run_dir: str | None) -> AbstractContextManager[ShardSink]:
        return _sink(final, attempt)

    def read_file(self, path: str, check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
        data, at, i = fs.read_bytes(path), 0, 0
        while at < len(data):
            (n,) = struct.unpack_from("<I", data, at)
            yield i, data[at + 4: at + 4 + n]
            at, i = at + 4 + n, i + 1

    def verify(self, path: str, entry: dict[str, Any], check_records: bool,
               index: str | None) -> int:
        data = fs.read_bytes(path)
        if (len(data), hashlib.sha256(data).hexdigest()) != (entry["num_bytes"], entry["sha256"]):
            raise VerifyError(f"{path}: not the bytes the manifest lists")
        return sum(1 for _ in self.read_file(path)) if check_records else entry["num_records"]


class _Sink:
    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self._sha = fh, hashlib.sha256()
        self.num_bytes, self.sha256 = 0, ""
        self.index_file: IndexFile | None = None

    def write(self, framed: pa.Buffer, frame_sizes: np.ndarray) -> None:
        view, at = memoryview(framed), 0
        for n in frame_sizes.tolist():
            payload = bytes(view[at + HEADER: at + n - FOOTER])
            data = struct.pack("<I", len(payload)) + payload
            self._sha.update(data)
            self.num_bytes += len(data)
            self.fh.write(data)
            at += n

    def finish(self) -> None:
        self.sha256 = self._sha.hexdigest()


@contextmanager
def _sink(final: str, attempt: OpenAttempt) -> Iterator[_Sink]:
    with attempt(final) as fh:
        yield _Sink(fh)


@pytest.fixture
def toy_format(monkeypatch: pytest.MonkeyPatch) -> ShardAdapter:
    adapter = LengthPrefixed()
    monkeypatch.setitem(shards.ADAPTER_FOR_FORMAT, adapter.name, adapter)  # the one table
    return adapter


def _job(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    (tmp_path / "s.yaml").write_text(IDS_SCHEMA)
    (tmp_path / "d.csv").write_text("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n"
                                                         for i in range(500)))
    return {"schema": "s.yaml", "source": {"format": "csv", "paths": ["d.csv"],
                                           "block_rows": 100},
            "split": {"train": 0.8, "test": 0.2}, "output": "out", "shards": 2,
            "shuffle": {"seed": 7}, **extra}


def test_a_format_in_the_table_is_a_format_everywhere(tmp_path, toy_format) -> None:
    """Config, the rules, names, the shard writer and the reader: all through the table."""
    job = job_from_dict(_job(tmp_path, format="lpr"), path="job.yaml", base_dir=str(tmp_path))
    assert (job.format, job.index) == ("lpr", False)
    with pytest.raises(ConfigError, match="compression: gzip does not apply to format: lpr "
                                          r"\(a toy format\)"):
        job_from_dict(_job(tmp_path, format="lpr", compression="gzip"), path="job.yaml",
                      base_dir=str(tmp_path))
    assert format_problem("lpr", "none", True).rule == "index"
    fmt = ShardFormat.of("lpr")
    assert fmt.shard_name("train", 1, 4) == "train-00001-of-00004.lpr"
    from etl.shuffle.planning import ShardPlan  # noqa: PLC0415 - the writer's inputs
    from etl.shuffle.runs import MemorySlice, sorted_run  # noqa: PLC0415
    from etl.shuffle.shard_writer import write_shard  # noqa: PLC0415

    records = [f"record {i}".encode() for i in range(10)]
    ids = np.arange(10, dtype=np.uint64)
    run = sorted_run("train", ids, ids, records)
    plan = ShardPlan("train", 0, 1, 0, 2**64, 0, 10)
    result = write_shard(plan, [MemorySlice(run.keys, run.ids, run.offsets, run.payload)],
                         str(tmp_path), fmt)
    path = str(tmp_path / result.name)
    assert adapter_of(path) is toy_format
    assert [r for _, r in read_shard(path)] == records
    entry = {"num_bytes": result.num_bytes, "sha256": result.sha256, "num_records": 10}
    assert toy_format.verify(path, entry, True, None) == 10


@pytest.mark.slow  # a Beam pipeline
def test_a_toy_format_and_a_toy_strategy_convert_a_job(tmp_path, toy_format,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Registered in the tables only, both run a conversion end to end: the same records in
    the same shards as the default format and strategy write."""
    import apache_beam as beam  # noqa: PLC0415 - the slow test only

    from cli.run import run_job  # noqa: PLC0415 - Beam
    from etl import shuffle  # noqa: PLC0415
    from etl.job.config import load_job  # noqa: PLC0415
    from etl.output.manifest import load_manifest, verify  # noqa: PLC0415
    from etl.shuffle.runs import MemorySlice  # noqa: PLC0415
    from etl.shuffle.shard_writer import write_shard  # noqa: PLC0415
    from transforms import shuffles  # noqa: PLC0415 - Beam
    from transforms.shuffle_steps import ShuffleSteps, all_shards  # noqa: PLC0415 - Beam

    toy = types.ModuleType("toy_strategy")  # its Beam-free half
    toy.NAME, toy.HOLDS_SPILLS, toy.RUNNER_SHUFFLE = "toy", False, False

    class ToySteps(ShuffleSteps):
        """Every run pickled through a side input to every shard of its split."""

        strategy = toy
        run_type = bytes

        def emit(self, run, spill_dir, shuffled, held, writers):  # noqa: ANN001, ANN201
            return pickle.dumps((run.stats(shuffled), run))

        def run_keys(self, item, shuffled):  # noqa: ANN001, ANN201
            return pickle.loads(item)[0]

        def shard_results(self, runs, plan, write):  # noqa: ANN001, ANN201
            return (plan | "ToyTasks" >> beam.FlatMap(
                        lambda plan, runs: [(p, runs) for p in all_shards(plan)],
                        beam.pvalue.AsList(runs))
                    | "WriteShards" >> beam.ParDo(write))

        def write_shard(self, element, plan, staging_dir, fmt, held):  # noqa: ANN001, ANN201
            shard, items = element
            runs = [r for _, r in map(pickle.loads, items) if r.split == shard.split]
            return write_shard(shard, [MemorySlice(r.keys, r.ids, r.offsets, r.payload,
                                                   *r.key_range(shard.key_lo, shard.key_hi))
                                       for r in runs], staging_dir, fmt)

    monkeypatch.setitem(shuffle.STRATEGIES, "toy", toy)  # the two halves of the one table
    monkeypatch.setitem(shuffles.STEPS, "toy", ToySteps())
    outputs = {}
    for name, extra in {"default": {"shuffle": {"seed": 7, "via": "files"}},
                        "toy": {"format": "lpr", "shuffle": {"seed": 7, "via": "toy"}}}.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "job.yaml").write_text(json.dumps(_job(folder, **extra)))
        run_job(load_job(str(folder / "job.yaml")), ["--runner=FnApiRunner"])
        outputs[name] = str(folder / "out")
    got = {}
    for name, out in outputs.items():
        manifest = load_manifest(out)
        verify(out)
        got[name] = {s["path"].split(".")[0]: [r for _, r in read_shard(fs.join(out, s["path"]))]
                     for info in manifest["splits"].values() for s in info["shards"]}
    assert load_manifest(outputs["toy"])["format"] == "lpr"
    assert got["toy"] == got["default"] and sum(map(len, got["toy"].values())) == 500
