"""The engine shuffle where it broke: large runs through the local runner's data plane, two
runs at once, in threads and in separate worker processes, repeated.

Before the fix (transforms/beam_fixes.py: Beam's local runner flushed data-plane buffers from
a timer thread and threw away what the bundle thread wrote meanwhile), this job — 4M CSV rows
shaped like the user's report (n, x, s; every 7th `s` a quoted field with a newline and
doubled quotes), split 0.9/0.1, 8 shards, `shuffle: {seed: 5, via: engine}` — failed in 4 of
6 runs started as 3 pairs at once in the default (multi_threading) mode, every pair losing
at least one run (`planned 49979 records, found 48313`, a torn element decoded as None, one
run at 23.6 GB peak RSS decoding garbage), and in 1 of 4 runs with worker processes
(`python -m benchmarks.engine_stress --rows 4000000 --pairs 3 [--mode processes] --checkout
<checkout of 1400d7f>`, with PYTHONPATH=<that checkout> so worker processes import it too).
Smaller inputs fail less often: 2 of 8 runs at 2M rows, 0 of 12 at 1M on a quiet machine
(8 of 16 with other jobs running), 0 of 8 at 1M with worker processes. Each run here must
write the same shards (sha256) as `via: files`. About 3 minutes; ~9 GB of RAM at peak (two
local engine runs at once: the local runner holds every GroupByKey input in memory).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from apache_beam.runners.worker import data_plane, statesampler

from benchmarks.data import write_quoted_csv
from tests.pipelines import RUNNER, convert, write_csv, write_yaml
from transforms import beam_fixes

ROOT = Path(__file__).resolve().parent.parent
ROWS = 4_000_000
SCHEMA = {"name": "stress", "kind": "example", "features": {
    "n": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": []},
    "s": {"dtype": "string", "shape": []}}}
# the CLI's local mode for several read tasks: in-process workers, one per core
THREADS = ["--direct_running_mode=multi_threading"]
DEFAULT: list[str] = []  # one input read whole: the CLI's in_memory mode, a shard thread per core
PROCESSES = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


@pytest.fixture(scope="module")
def stress_dir(tmp_path_factory) -> Iterator[Path]:
    """The 4M-row CSV and its outputs, 1.1 GB, removed once the module's tests are done."""
    folder = tmp_path_factory.mktemp("stress")
    write_quoted_csv(str(folder / "big.csv"), ROWS)
    write_yaml(str(folder / "schema.yaml"), SCHEMA)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _job(folder: Path, name: str, via: str) -> str:
    return write_yaml(str(folder / f"{name}.yaml"), {
        "schema": "schema.yaml", "source": {"format": "csv", "paths": ["big.csv"]},
        "split": {"train": 0.9, "test": 0.1}, "output": f"out-{name}",
        "shuffle": {"seed": 5, "via": via}, "shards": 8})


def _start(job: str, beam_args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run_pipeline.py"), "run", job, "--force",
         "--progress", "none", *beam_args],
        cwd=os.path.dirname(job), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _shards(out: Path) -> dict[str, str]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {s["path"]: s["sha256"] for split in manifest["splits"].values()
            for s in split["shards"]}


@pytest.fixture(scope="module")
def reference(stress_dir) -> dict[str, str]:
    proc = _start(_job(stress_dir, "files", "files"), THREADS)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output
    shards = _shards(stress_dir / "out-files")
    assert len(shards) == 16
    return shards


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "beam_args", "pairs"),
                         [("threads", THREADS, 2), ("processes", PROCESSES, 2),
                          ("default", DEFAULT, 1)])
def test_two_engine_runs_at_once_write_exactly_the_files_shards(stress_dir, reference, mode,
                                                                 beam_args, pairs) -> None:
    for attempt in range(pairs):
        jobs = [_job(stress_dir, f"engine-{mode}-{k}", "engine") for k in "ab"]
        procs = [_start(job, beam_args) for job in jobs]
        outputs = [p.communicate(timeout=900)[0] for p in procs]
        for k, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
            assert proc.returncode == 0, f"pair {attempt} run {k}: {output[-2000:]}"
            assert "read 4,000,000 records" in output, output[-2000:]
            out = stress_dir / f"out-engine-{mode}-{'ab'[k]}"
            assert _shards(out) == reference, f"pair {attempt} run {k}: shards differ"


def test_the_local_runner_runs_without_the_periodic_flusher(tmp_path, monkeypatch) -> None:
    """Every data-plane stream of a run with our transforms is size-based: no timer thread
    flushes a buffer that a bundle is writing."""
    limits: list[int] = []
    create = data_plane.ClosableOutputStream.create

    def spy(close_callback, flush_callback, data_buffer_time_limit_ms):
        limits.append(data_buffer_time_limit_ms)
        return create(close_callback, flush_callback, data_buffer_time_limit_ms)

    monkeypatch.setattr(data_plane.ClosableOutputStream, "create", staticmethod(spy))
    write_csv(tmp_path / "ids.csv", 3000)
    convert(tmp_path, {"train": {"format": "csv", "paths": ["ids.csv"]}}, via="engine",
            beam_args=[*RUNNER, "--direct_running_mode=multi_threading",
                       "--direct_num_workers=2"])
    assert beam_fixes.applied()
    assert limits and set(limits) == {0}, sorted(set(limits))


def test_bundles_of_a_local_run_sample_every_10_ms_at_most(tmp_path, monkeypatch) -> None:
    """Every bundle's state sampler runs with our period, not Beam's 200 ms, whose join at the
    end of each bundle left both cores idle for up to 0.2 s (transforms/beam_fixes.py)."""
    periods: list[int] = []
    start = statesampler.StateSampler.start

    def spy(self) -> None:
        periods.append(self.sampling_period_ms)
        start(self)

    monkeypatch.setattr(statesampler.StateSampler, "start", spy)
    write_csv(tmp_path / "ids.csv", 3000)
    convert(tmp_path, {"train": {"format": "csv", "paths": ["ids.csv"]}},
            beam_args=[*RUNNER, "--direct_running_mode=multi_threading",
                       "--direct_num_workers=2"])
    assert periods and set(periods) == {beam_fixes.SAMPLING_PERIOD_MS}, sorted(set(periods))
    assert statesampler.DEFAULT_SAMPLING_PERIOD_MS == 200  # Beam's, left as it was


def test_why_beams_time_based_stream_loses_data() -> None:
    """The Beam bug itself, made deterministic: the flusher sends get(), then _clear()s; what
    the bundle thread writes while the send blocks (a full send queue) is lost. If this test
    fails, Beam fixed its stream: transforms/beam_fixes.py can go (keep the stress test)."""
    sent: list[bytes] = []
    sending, written = threading.Event(), threading.Event()

    def blocking_send(data: bytes) -> None:  # a send queue full of large elements
        sending.set()
        written.wait(5)
        sent.append(data)

    stream = data_plane.TimeBasedBufferingClosableOutputStream(
        close_callback=sent.append, flush_callback=blocking_send, time_flush_threshold_ms=50)
    stream.write(b"element-1;")
    assert sending.wait(5)  # the timer thread is flushing element 1
    stream.write(b"element-2;")  # the bundle thread goes on writing
    written.set()
    stream.close()
    assert b"".join(sent) == b"element-1;", "Beam no longer loses element 2: see docstring"
