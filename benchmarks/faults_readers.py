"""Issue 28, point 2 (readers never return wrong data): fault cases for benchmarks.fault_cases.

Each case writes an output with the real CLI (`run_pipeline.py run`, via fault_cases.Runner),
damages, truncates or republishes it, and reads it with `etl.open_records` in a subprocess of
the same checkout (the reader is a Python API, not a command). The facts: the reading
process's exit code (-7: killed by SIGBUS), the first line it printed (the error it raised,
or what it read), and whether any record came back wrong (decoded as the defaults, or the
new output's records under the old positions).

    CASES: dict[str, Callable[[Runner, Path], dict]]  (registered by benchmarks.fault_cases)
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # fault_cases imports this module to register CASES: no import cycle
    from benchmarks.fault_cases import Runner

# every feature optional: a shard read as empty records decodes as these defaults (id -1)
SCHEMA = """name: t
kind: example
features:
  id: {dtype: int64, shape: [], default: -1}
  x: {dtype: float32, shape: [], default: 1.5}
  name: {dtype: bytes, shape: [], default: "none"}
"""
ROWS = 200

# what the reading process prints: one line, the error or what it read
_PRELUDE = textwrap.dedent("""\
    import json, os, subprocess, sys
    import numpy as np
    import etl
    def report(read):
        try:
            ids = [int(v) for v in read()["id"]]
            print(json.dumps({"read": len(ids), "defaults": ids.count(-1), "ids": ids[:3]}))
        except Exception as e:
            print(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    """)


def _job(d: Path, first_id: int = 1000, pad: int = 0, **extra: Any) -> Path:
    """ROWS records of one size each (4-digit ids), 2 shards in input order."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "schema.yaml").write_text(SCHEMA)
    rows = [f"{i},{i * 0.5},n{i}{'p' * pad}" for i in range(first_id, first_id + ROWS)]
    (d / "in.csv").write_text("id,x,name\n" + "\n".join(rows) + "\n")
    job = {"schema": "schema.yaml", "sources": {"train": {"format": "csv", "paths": ["in.csv"]}},
           "output": "out", "shards": 2, "shuffle": False, "compression": "none", **extra}
    (d / "job.yaml").write_text(json.dumps(job))
    return d / "job.yaml"


_AR = {"format": "array_record", "index": False}


def _read(r: Runner, d: Path, body: str, *args: str) -> dict[str, Any]:
    """Run `body` (after _PRELUDE) in a reading process of the checkout under test."""
    proc = subprocess.run([r.python, "-c", _PRELUDE + textwrap.dedent(body), *args],
                          cwd=d, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(r.code),
                               "TF_CPP_MIN_LOG_LEVEL": "3"})
    lines = proc.stdout.splitlines()
    out: dict[str, Any] = {"exit": proc.returncode, "first": (lines[0][:200] if lines else "")}
    if len(lines) > 1:
        out["then"] = lines[1][:200]
    if proc.returncode < 0:
        out["killed_by"] = f"signal {-proc.returncode}"
    return out


def _written(r: Runner, d: Path, **extra: Any) -> tuple[Path, Path]:
    job = _job(d, **extra)
    res = r.run(job)
    if res["exit"] != 0:
        raise RuntimeError(f"the job did not write its output: {res}")
    return job, d / "out"


def array_record_cut_shard(r: Runner, d: Path) -> dict[str, Any]:
    """An ArrayRecord shard cut to half its size, every record read."""
    _, out = _written(r, d, **_AR)
    shard = out / "train-00000-of-00002.array_record"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    return _read(r, d, """\
        records = etl.open_records(sys.argv[1])
        report(lambda: records[np.arange(len(records))])
        """, str(out))


def array_record_flipped_chunk(r: Runner, d: Path) -> dict[str, Any]:
    """One flipped byte inside a record's chunk of an ArrayRecord shard."""
    _, out = _written(r, d, **_AR)
    shard = out / "train-00000-of-00002.array_record"
    data = bytearray(shard.read_bytes())
    data[500] ^= 0xFF
    shard.write_bytes(bytes(data))
    return _read(r, d, """\
        records = etl.open_records(sys.argv[1])
        report(lambda: records[np.arange(len(records))])
        """, str(out))


def array_record_flipped_signature(r: Runner, d: Path) -> dict[str, Any]:
    """One flipped byte in the 64-byte Riegeli signature at the start of an ArrayRecord shard."""
    _, out = _written(r, d, **_AR)
    shard = out / "train-00000-of-00002.array_record"
    data = bytearray(shard.read_bytes())
    data[30] ^= 0xFF
    shard.write_bytes(bytes(data))
    return _read(r, d, """\
        records = etl.open_records(sys.argv[1])
        report(lambda: records[np.arange(len(records))])
        """, str(out))


_REPUBLISH = """\
    records = etl.open_records(sys.argv[1])
    records[0]  # shard 0 opened
    with open("in.csv", "w") as fh:  # other records of the same sizes: the rerun rebuilds
        fh.write("id,x,name\\n" + "".join(f"{i},{i * 0.5},n{i}\\n" for i in range(5000, 5200)))
    rerun = subprocess.run([sys.executable, sys.argv[2], "run", "job.yaml",
                            "--runner=FnApiRunner"], capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-500:]
    report(lambda: records[[0, 150]])  # before: 1000 (old shard) and 5150 (new): a mix
    report(lambda: etl.open_records(sys.argv[1])[[0, 150]])
    """


def reader_republished_tfrecord(r: Runner, d: Path) -> dict[str, Any]:
    """open_records, then the output is republished (same sizes, same index files), then a
    batch from both shards through the reader opened before."""
    _, out = _written(r, d)
    return _read(r, d, _REPUBLISH, str(out), str(r.code / "run_pipeline.py"))


def reader_republished_array_record(r: Runner, d: Path) -> dict[str, Any]:
    _, out = _written(r, d, **_AR)
    return _read(r, d, _REPUBLISH, str(out), str(r.code / "run_pipeline.py"))


_TRUNCATE = """\
    records = etl.open_records(sys.argv[1])
    records[0], records[99]  # shard 0 opened and read
    os.truncate(sys.argv[2], 200)
    report(lambda: records[[90, 95, 99]])
    print("alive")
    """


def tfrecord_truncated_while_open(r: Runner, d: Path) -> dict[str, Any]:
    """A TFRecord shard truncated in place while a reader has it open (was memory-mapped)."""
    _, out = _written(r, d, pad=10_000)
    return _read(r, d, _TRUNCATE, str(out), str(out / "train-00000-of-00002.tfrecord"))


def array_record_truncated_while_open(r: Runner, d: Path) -> dict[str, Any]:
    _, out = _written(r, d, pad=10_000, **_AR)
    return _read(r, d, _TRUNCATE, str(out), str(out / "train-00000-of-00002.array_record"))


def index_file_huge_number(r: Runner, d: Path) -> dict[str, Any]:
    """An index file with a number beyond int64 on one line."""
    _, out = _written(r, d)
    index = out / "train-00001-of-00002.tfrecord.index"
    lines = index.read_text().splitlines()
    lines[3] = "99999999999999999999 66"
    index.write_text("\n".join(lines) + "\n")
    return _read(r, d, "report(lambda: etl.open_records(sys.argv[1])[[0]])\n", str(out))


def index_file_not_the_manifests(r: Runner, d: Path) -> dict[str, Any]:
    """An index file of the same size and the same numbers but not the published bytes (a
    leading zero added, the last newline dropped): only its sha256 tells."""
    _, out = _written(r, d)
    index = out / "train-00001-of-00002.tfrecord.index"
    data = index.read_bytes()
    index.write_bytes(b"0" + data[:-1])
    return _read(r, d, "report(lambda: etl.open_records(sys.argv[1])[[0]])\n", str(out))


CASES: dict[str, Callable[[Runner, Path], dict[str, Any]]] = {
    "array_record_cut_shard": array_record_cut_shard,
    "array_record_flipped_chunk": array_record_flipped_chunk,
    "array_record_flipped_signature": array_record_flipped_signature,
    "reader_republished_tfrecord": reader_republished_tfrecord,
    "reader_republished_array_record": reader_republished_array_record,
    "tfrecord_truncated_while_open": tfrecord_truncated_while_open,
    "array_record_truncated_while_open": array_record_truncated_while_open,
    "index_file_huge_number": index_file_huge_number,
    "index_file_not_the_manifests": index_file_not_the_manifests,
}
