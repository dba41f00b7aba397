"""Split reads end to end: a file read as many tasks gives the same shards, byte for byte, and
the same dead-letter records (with their lines) as the file read whole, for every splittable
format and both shuffle strategies."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from cli.run import plan_reads, read_split_bytes
from etl.formats.idx import write_idx
from etl.job.config import DEFAULT_SPLIT_BYTES, job_from_dict
from etl.job.read_plan import all_tasks, needs_scan
from tests.pipelines import RUNNER, convert, manifest, shard_hashes

IDS = {"name": "ids", "kind": "example",
       "features": {"id": {"dtype": "int64", "shape": []},
                    "name": {"dtype": "bytes", "shape": [], "default": ""}}}
TEXT = {"name": "t", "kind": "example",
        "features": {"id": {"dtype": "int64", "shape": []},
                     "length": {"dtype": "int64", "shape": []},
                     "text": {"dtype": "bytes", "shape": []}}}
IMAGES = {"name": "img", "kind": "example",
          "features": {"image": {"dtype": "uint8", "shape": [8, 8], "encoding": "raw"},
                       "label": {"dtype": "int64", "shape": []}}}
ROWS = 3000
MULTI = RUNNER + ["--direct_running_mode=multi_threading", "--direct_num_workers=2"]


def _csv(d: Path) -> dict[str, Any]:
    lines = ["id,name"]
    for i in range(ROWS):
        if i % 97 == 5:
            lines.append(f'{i},"two\nlines, quoted ""{i}"""')  # a quoted newline and escapes
        elif i == 1500:
            lines.append(f'{i},"never closed')  # rejected at its line, reading resumes after
        elif i % 500 == 7:
            lines.append("")  # blank line: no record
        else:
            lines.append(f"{i},n{i}")
    (d / "in.csv").write_text("\n".join(lines) + "\n")
    return {"format": "csv", "paths": ["in.csv"]}


def _jsonl(d: Path) -> dict[str, Any]:
    rows = [json.dumps({"id": i, "name": f"n{i}"}) for i in range(ROWS)]
    rows[1234] = "{not json"
    (d / "in.jsonl").write_text("\n".join(rows) + "\n")
    return {"format": "jsonl", "paths": ["in.jsonl"]}


def _text(d: Path) -> dict[str, Any]:
    with open(d / "in.txt", "wb") as fh:
        for i in range(ROWS):
            fh.write(b"caf\xe9 bad\n" if i == 2100 else f"line {i} has words\n".encode())
    return {"format": "text", "paths": ["in.txt"]}


def _parquet(d: Path) -> dict[str, Any]:
    table = pa.table({"id": np.arange(ROWS), "name": [f"n{i}" for i in range(ROWS)]})
    pq.write_table(table, d / "in.parquet", row_group_size=250)
    return {"format": "parquet", "paths": ["in.parquet"]}


def _idx(d: Path) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    write_idx(str(d / "i-images-idx3-ubyte"), rng.integers(0, 256, (ROWS, 8, 8), dtype=np.uint8))
    write_idx(str(d / "i-labels-idx1-ubyte"), rng.integers(0, 10, ROWS, dtype=np.uint8))
    return {"format": "idx", "paths": {"image": "i-images-idx3-ubyte",
                                       "label": "i-labels-idx1-ubyte"}}


def _npy(d: Path) -> dict[str, Any]:
    np.save(d / "id.npy", np.arange(ROWS, dtype=np.int64))
    np.save(d / "name.npy", np.array([f"n{i}" for i in range(ROWS)]).astype(bytes))
    return {"format": "npy", "paths": {"id": "id.npy", "name": "name.npy"}}


CASES: dict[str, tuple[Callable[[Path], dict[str, Any]], dict[str, Any]]] = {
    "csv": (_csv, IDS), "jsonl": (_jsonl, IDS), "text": (_text, TEXT),
    "parquet": (_parquet, IDS), "idx": (_idx, IMAGES), "npy": (_npy, IDS),
}


def _run(d: Path, make: Callable[[Path], dict[str, Any]], schema: dict[str, Any],
         split_bytes: int, via: str) -> tuple[dict[str, str], list[dict[str, Any]], int]:
    d.mkdir(parents=True)
    source = make(d)
    job = {"sources": {"train": {**source, "block_rows": 400}}}
    out = convert(d, job["sources"], schema=schema, via=via, split_bytes=split_bytes,
                  max_bad_fraction=0.01, shards=3)
    doc = {"schema": str(d / "schema.yaml"), "output": str(d / "out"), "split_bytes": split_bytes,
           **job}
    job_cfg = job_from_dict(doc, path="job.yaml", base_dir=str(d))
    tasks = all_tasks(plan_reads(job_cfg), job_cfg.sources, job_cfg.base_dir, split_bytes)
    dead = Path(out) / "rejected" / "rejected.jsonl"
    bad = [json.loads(x) for x in dead.read_text().splitlines()] if dead.exists() else []
    for b in bad:
        b["source"] = os.path.basename(b["source"])
    assert manifest(out)["inputs"][0]["read"] == sum(
        s["num_records"] for s in manifest(out)["splits"]["train"]["shards"]) + len(bad)
    return shard_hashes(out), bad, len(tasks)


@pytest.mark.slow
@pytest.mark.parametrize("via", ["files", "engine"])
@pytest.mark.parametrize("fmt", list(CASES))
def test_one_vs_many_splits_write_identical_shards(tmp_path: Path, fmt: str, via: str) -> None:
    make, schema = CASES[fmt]
    whole, whole_bad, one = _run(tmp_path / "whole", make, schema, 0, via)
    split, split_bad, many = _run(tmp_path / "split", make, schema, 2000, via)
    assert one == 1 and many > 5  # the file really was cut into many read tasks
    assert split == whole and len(whole) == 3
    assert split_bad == whole_bad
    expected_bad = {"csv": 1, "jsonl": 1, "text": 1}.get(fmt, 0)
    assert len(whole_bad) == expected_bad


@pytest.mark.slow
def test_several_large_files_are_cut_on_several_workers(tmp_path: Path) -> None:
    """Two CSV files over split_bytes: their cut points are found after the files are spread
    over workers (DistributeFiles); the shards equal those of reading both whole."""
    def two_files(d: Path) -> dict[str, Any]:
        d.mkdir(parents=True)
        for part in ("a", "b"):
            (d / f"{part}.csv").write_text(
                "id,name\n" + "".join(f"{i},{part}{i}\n" for i in range(ROWS)))
        return {"train": {"format": "csv", "paths": ["*.csv"], "block_rows": 400}}

    whole = convert(tmp_path / "whole", two_files(tmp_path / "whole"), schema=IDS, shards=3,
                    split_bytes=0, beam_args=MULTI)
    split = convert(tmp_path / "split", two_files(tmp_path / "split"), schema=IDS, shards=3,
                    split_bytes=4000, beam_args=MULTI)
    job = job_from_dict({"schema": "s.yaml", "output": "o", "split_bytes": 4000,
                         "sources": two_files(tmp_path / "plan")},
                        path="job.yaml", base_dir=str(tmp_path / "plan"))
    plan = plan_reads(job)
    assert needs_scan(plan.units, job.split_bytes) == 2  # so the pipeline spreads them
    assert len(all_tasks(plan, job.sources, job.base_dir, job.split_bytes)) > 10
    assert shard_hashes(split) == shard_hashes(whole)
    counts = [[{k: v for k, v in i.items() if k != "path"} for i in manifest(out)["inputs"]]
              for out in (split, whole)]
    assert counts[0] == counts[1] == [{"read": ROWS, "written": ROWS, "rejected": 0}] * 2
    assert sum(i["read"] for i in manifest(split)["inputs"]) == 2 * ROWS


@pytest.mark.parametrize(("given", "args", "expected"), [
    (None, ["--runner=FnApiRunner", "--direct_num_workers=2"], 0),
    (None, ["--runner=FnApiRunner"], 0),  # one worker
    (None, ["--runner=FnApiRunner", "--direct_num_workers=8"], DEFAULT_SPLIT_BYTES),
    (None, ["--runner=DataflowRunner"], DEFAULT_SPLIT_BYTES),
    ("4KiB", ["--runner=FnApiRunner", "--direct_num_workers=2"], 4096),
    (0, ["--runner=DataflowRunner"], 0),
])
def test_split_bytes_default_follows_the_runner(given, args, expected) -> None:
    """Unset: whole files on a local runner with <= 2 workers (one reader keeps two cores
    busy), 256MiB elsewhere; a job's own value always wins."""
    doc = {"schema": "s.yaml", "output": "o", "sources": {"t": {"format": "csv", "paths": ["x"]}}}
    if given is not None:
        doc["split_bytes"] = given
    job = job_from_dict(doc, path="job.yaml", base_dir=".")
    assert read_split_bytes(job, PipelineOptions(args)) == expected
