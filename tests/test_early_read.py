"""The first read task read while Beam is imported (transforms/early_read.py) and the
read-ahead it rests on (transforms/prefetch.py): bounded, exact, and dropped whenever the run
would not read the same."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from etl.contract.schema import load_schema
from etl.formats.idx import write_idx
from etl.job.config import load_job
from etl.job.read_plan import plan_units, tasks_of
from etl.schedule import input_pin
from etl.schedule.fingerprint import crc32c_of
from etl.sources import make_reader
from tests.helpers import ROOT, RUN, digest, leftovers, wait_paused
from transforms import early_read
from transforms.prefetch import ReadAhead

# ---- the read-ahead ----------------------------------------------------------------------


class Counted:
    """Items 0.. of 10 bytes each; `pulled` counts those the producer asked for, `asked[k]` is
    set when item k is asked for; `closed` once the producer closed it."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.pulled = 0
        self.asked = [threading.Event() for _ in range(n + 1)]
        self.closed = threading.Event()

    def items(self) -> Iterator[int]:
        try:
            for i in range(self.n):
                self.pulled = i + 1
                self.asked[i].set()
                if i == self.fail_at:
                    raise ValueError(f"bad item {i}")
                yield i
        finally:
            self.closed.set()


def _wait(check, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_read_ahead_holds_its_budget_then_only_its_depth() -> None:
    src = Counted(100)
    ahead = ReadAhead(src.items(), depth=1, budget=35, size_of=lambda _: 10)
    # 4 items wait (0, 10, 20, 30 bytes held before each: under 35), the 5th is read and waits
    assert src.asked[4].wait(30)
    _wait(lambda: len(ahead._waiting) == 4, "four items waiting")
    time.sleep(0.2)  # a producer that ignored the budget would have asked for more by now
    assert src.pulled == 5 and not src.asked[5].is_set()
    ahead.limit(depth=2)  # taken over: two items ahead at most
    got = ahead.consume()
    assert [next(got) for _ in range(3)] == [0, 1, 2]  # 1 left + item 4 put: 2 wait
    _wait(lambda: len(ahead._waiting) == 2, "two items waiting")
    time.sleep(0.2)
    assert src.pulled == 6  # the 6th item read, waiting for room
    assert list(got) == list(range(3, 100))
    assert src.closed.is_set()


def test_read_ahead_raises_the_producers_error_where_it_happened() -> None:
    src = Counted(10, fail_at=3)
    got = ReadAhead(src.items(), depth=5).consume()
    assert [next(got) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad item 3"):
        next(got)


def test_closing_the_consumer_stops_the_producer_and_drops_what_waits() -> None:
    src = Counted(1_000)
    ahead = ReadAhead(src.items(), depth=3)
    got = ahead.consume()
    assert next(got) == 0
    got.close()  # the consumer gave up (an error downstream)
    assert src.closed.is_set() and not ahead._worker.is_alive()
    assert src.pulled < 10 and len(ahead._waiting) == 0
    with pytest.raises(RuntimeError, match="closed"):
        next(ahead.consume())


# ---- which reads start early, and what they give --------------------------------------------

MNIST = f"{ROOT}/schemas/mnist.yaml"


def _idx_job(folder: Path, labels: np.ndarray, out: Path, block_rows: int = 500) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    write_idx(str(folder / "images-idx3-ubyte"),
              rng.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8))
    write_idx(str(folder / "labels-idx1-ubyte"), labels)
    job = folder / "job.yaml"
    job.write_text(f"schema: {MNIST}\noutput: {out}\nshards: 3\nshuffle: {{seed: 5}}\n"
                   f"sources:\n  train: {{format: idx, block_rows: {block_rows}, paths: "
                   "{image: images-idx3-ubyte, label: labels-idx1-ubyte}}\n")
    return str(job)


def _blocks(blocks) -> list[tuple[np.ndarray, dict[str, bytes]]]:
    return [(b.positions.copy(), {k: np.asarray(v).tobytes() for k, v in b.columns.items()})
            for b in blocks]


def test_an_idx_jobs_first_task_is_read_early_and_gives_the_readers_blocks(tmp_path: Path) -> None:
    labels = (np.arange(2_300) % 10).astype(np.uint8)
    job = load_job(_idx_job(tmp_path / "job", labels, tmp_path / "out"))
    early = early_read.start(job)
    assert early is not None
    reader = make_reader(job.sources["train"], job.base_dir, "sources.train")
    reader.prepare(load_schema(job.schema_path), job.reading.max_record_bytes)
    plan = plan_units(job.sources, job.base_dir, job.path)
    task = next(tasks_of(plan.units[0], reader, 0))
    assert early.task == task
    assert early.take(dataclasses.replace(task, ordinal=1)) is None  # another task
    got = early.take(task)
    assert got is not None and early.taken
    expected = _blocks(reader.read_split(task.split))
    assert len(expected) == 5  # 500-row blocks of 2,300 records
    for (pos, cols), (want_pos, want_cols) in zip(_blocks(got), expected, strict=True):
        assert np.array_equal(pos, want_pos) and cols == want_cols
    assert early.take(task) is None  # taken once


def test_a_csv_jobs_inputs_are_fingerprinted_early_but_not_read(tmp_path: Path) -> None:
    """CSV parses on Arrow's threads (no early blocks); its fingerprint is taken early, and
    given to the run only for a file pinned as it was."""
    csv = tmp_path / "a.csv"
    csv.write_text("id,v\n1,2.5\n")
    (tmp_path / "s.yaml").write_text("name: s\nkind: example\nfeatures:\n"
                                     "  id: {dtype: int64, shape: []}\n"
                                     "  v: {dtype: float32, shape: []}\n")
    (tmp_path / "job.yaml").write_text(f"schema: s.yaml\noutput: {tmp_path / 'out'}\n"
                                       "sources:\n  train: {format: csv, paths: [a.csv]}\n")
    early = early_read.start(load_job(str(tmp_path / "job.yaml")))
    assert early is not None and early.task is None
    pinned = input_pin.pins([str(csv)])
    assert early.fingerprints_for(pinned) == {
        str(csv): {"kind": "crc32c", "value": crc32c_of(str(csv))}}
    assert early.take(early.task) is None  # type: ignore[arg-type]
    csv.write_text("id,v\n1,2.6\n")  # the same size, another value
    assert early.fingerprints_for(input_pin.pins([str(csv)])) == {}


@pytest.mark.parametrize("large", [True, False])
def test_a_large_csv_jobs_loops_are_compiled_while_beam_is_imported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, large: bool) -> None:
    """From COMPILE_AHEAD_BYTES of input, the CSV chunk loop, the Example loop and the
    framing are compiled in the launcher (the run's first read and block then find them
    compiled); below it, nothing is."""
    from etl.contract.codec import Encoder  # noqa: PLC0415
    from etl.formats import jit  # noqa: PLC0415
    from etl.sources.csv_source import CsvReader  # noqa: PLC0415

    if jit.compile_ir("define void @f() {\n  ret void\n}", ()) is None:
        pytest.skip("no compiled loops on this machine")
    monkeypatch.setattr(CsvReader, "FAST_BLOCK_BYTES", 4096)
    monkeypatch.setattr(early_read, "COMPILE_AHEAD_BYTES", 64 << 10 if large else 1 << 30)
    csv = tmp_path / "a.csv"
    # names no other test compiles for: the cache must start without these layouts
    a, b = f"ahead{large:d}_id", f"ahead{large:d}_v"
    csv.write_text(f"{a},{b}\n" + "".join(f"{i},{i}.5\n" for i in range(20000)))
    (tmp_path / "s.yaml").write_text(f"name: s\nkind: example\nfeatures:\n"
                                     f"  {a}: {{dtype: int64, shape: []}}\n"
                                     f"  {b}: {{dtype: float32, shape: []}}\n")
    (tmp_path / "job.yaml").write_text(f"schema: s.yaml\noutput: {tmp_path / 'out'}\n"
                                       "sources:\n  train: {format: csv, paths: [a.csv]}\n")
    compiled = []
    real = jit._compile

    def counting(ir: str, signatures: tuple) -> object:
        compiled.append(ir)
        return real(ir, signatures)

    monkeypatch.setattr(jit, "_compile", counting)
    early = early_read.start(load_job(str(tmp_path / "job.yaml")))
    assert early is not None
    for thread in threading.enumerate():
        if thread.name == "etl-early-compile":
            thread.join(60)
    early.cancel()
    asked = len(compiled)
    assert (asked == 3) == large and (asked == 0) != large  # the CSV, Example, framing loops
    # the run's own asks are then answered from the cache, without compiling again
    reader = make_reader({"format": "csv", "paths": [str(csv)]}, str(tmp_path), "t")
    reader.prepare(load_schema(str(tmp_path / "s.yaml")), 1 << 20)
    before = real.cache_info().misses
    assert reader._chunk_parser([a, b]) is not None
    assert Encoder(load_schema(str(tmp_path / "s.yaml"))).compile_ahead()
    assert (real.cache_info().misses == before) == large


def test_a_database_job_is_not_listed_early(tmp_path: Path) -> None:
    """A query's listing is its survey: connecting to the database before Beam is imported
    would only be done again by the run (and retried on its schedule). Nothing connects."""
    import socket  # noqa: PLC0415 - this test's own needs

    accepted = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.1)
        stop = threading.Event()

        def count() -> None:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                accepted.append(1)
                conn.close()

        counter = threading.Thread(target=count, daemon=True)
        counter.start()
        (tmp_path / "s.yaml").write_text("name: s\nkind: example\nfeatures:\n"
                                         "  id: {dtype: int64, shape: []}\n")
        url = f"postgresql://etl@127.0.0.1:{server.getsockname()[1]}/db"
        (tmp_path / "job.yaml").write_text(
            f"schema: s.yaml\noutput: {tmp_path / 'out'}\n"
            f"sources:\n  train: {{format: sql, url: '{url}', query: 'SELECT 1 AS id'}}\n")
        try:
            assert early_read.start(load_job(str(tmp_path / "job.yaml"))) is None
        finally:
            stop.set()
            counter.join()
    assert accepted == []


@pytest.mark.parametrize("change", ["input", "schema", "split_bytes"])
def test_a_changed_input_or_setting_cancels_the_early_read(tmp_path: Path, change: str) -> None:
    labels = (np.arange(1_200) % 10).astype(np.uint8)
    job = load_job(_idx_job(tmp_path / "job", labels, tmp_path / "out"))
    early = early_read.start(job)
    assert early is not None
    schema, source = load_schema(job.schema_path).to_yaml(), job.sources["train"]
    paths = [i["path"] for i in plan_units(job.sources, job.base_dir, job.path).inputs]
    split_bytes = 0
    if change == "input":
        label_file = tmp_path / "job" / "labels-idx1-ubyte"
        os.utime(label_file, ns=(0, os.stat(label_file).st_mtime_ns + 1))
    elif change == "schema":
        schema += "# another schema\n"
    else:
        split_bytes = 1 << 20
    ident = early_read.identity(schema, source, job.base_dir, job.reading, split_bytes)
    assert early.keep_if(ident, input_pin.pins(paths)) is False
    assert early.take(early.task) is None and not early.taken
    # unchanged, the same checks keep it
    again = early_read.start(job)
    assert again is not None and again.keep_if(
        early_read.identity(load_schema(job.schema_path).to_yaml(), source, job.base_dir,
                            job.reading, 0), input_pin.pins(paths))
    again.cancel()


# ---- a real run ------------------------------------------------------------------------------

TAKEN = "read from the run's start (taken by the read step)"


def _run_log(out: Path) -> str:
    logs = sorted((out.parent / f".{out.name}.etl" / "logs").glob("*.log"))
    return logs[-1].read_text()


def _labels_back(out: Path) -> Counter[int]:
    import etl  # noqa: PLC0415 - TensorFlow: only the read-back

    return Counter(int(y) for batch in etl.make_dataset(str(out), split="train")
                   for y in batch["label"].numpy())


@pytest.mark.slow
def test_a_run_takes_the_early_read_and_writes_what_a_run_without_it_writes(
        tmp_path: Path) -> None:
    """The CLI's one-span run of an IDX job: the read step takes the early read (its log
    says so), and the shards are byte for byte those of the same job run in worker processes,
    where nothing is read early (and nothing placed)."""
    labels = (np.arange(3_000) % 10).astype(np.uint8)
    got = {}
    for mode in ("multi_threading", "multi_processing"):
        out = tmp_path / mode / "out"
        job = _idx_job(tmp_path / mode, labels, out)
        run = subprocess.run([sys.executable, RUN, "run", job, "--runner=FnApiRunner",
                              f"--direct_running_mode={mode}", "--direct_num_workers=2"],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        got[mode] = {k: v for k, v in digest(str(out)).items() if k != "manifest.json"}
        assert (TAKEN in _run_log(out)) == (mode == "multi_threading")
    assert got["multi_threading"] == got["multi_processing"]  # shards, indexes, schema files
    assert sum(k.endswith(".tfrecord") for k in got["multi_threading"]) == 3
    assert _labels_back(tmp_path / "multi_threading" / "out") == Counter(labels.tolist())


PAUSES = ("imports", "early-read", "early-fingerprints")


def _paused(job: str, pause: Path) -> subprocess.Popen[str]:
    """The run stopped before Beam's import, its early read after its first block and its
    fingerprints once taken."""
    from tests.test_signals import start  # noqa: PLC0415 - the signal tests' launcher

    proc = start(["run", job, "--force"], ",".join(PAUSES), pause)
    for phase in PAUSES:
        wait_paused(proc, pause, phase)
    return proc


@pytest.mark.slow
def test_an_input_changed_while_beam_is_imported_is_read_again(tmp_path: Path) -> None:
    """The labels replaced (same size, other values) once the early read holds its first
    block of the old ones and their fingerprint, before the run pins its inputs: the run
    drops both, publishes the new labels, every one, and records their fingerprint."""
    out = tmp_path / "out"
    job = _idx_job(tmp_path / "job", (np.arange(3_000) % 10).astype(np.uint8), out)
    proc = _paused(job, tmp_path / "pause")
    new = (np.arange(3_000) % 7).astype(np.uint8)
    write_idx(str(tmp_path / "new-labels"), new)
    os.replace(tmp_path / "new-labels", tmp_path / "job" / "labels-idx1-ubyte")
    for phase in PAUSES:
        (tmp_path / "pause" / f"{phase}.go").touch()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "read from the run's start" not in _run_log(out)
    assert _labels_back(out) == Counter(new.tolist())
    labels = str(tmp_path / "job" / "labels-idx1-ubyte")
    recorded = {i["path"]: i["fingerprint"] for i in json.loads(
        (out / "manifest.json").read_text())["input_files"]}
    assert recorded[labels] == crc32c_of(labels)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM],
                         ids=lambda s: signal.Signals(s).name)
def test_a_signal_while_the_early_read_runs_leaves_the_old_output(tmp_path: Path,
                                                                  signum: int) -> None:
    """A signal while Beam is imported and the first task is read beside it: one error line,
    the signal's exit code, the previous output as it was, nothing left beside it."""
    out = tmp_path / "out"
    job = _idx_job(tmp_path / "job", (np.arange(3_000) % 10).astype(np.uint8), out,
                   block_rows=100)
    first = subprocess.run([sys.executable, RUN, "run", job], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    before = digest(str(out))
    proc = _paused(job, tmp_path / "pause")
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    name = signal.Signals(signum).name
    assert err.splitlines() == [
        f"error: interrupted by {name} before publishing: nothing was published, "
        "the previous output is unchanged"], err
    assert digest(str(out)) == before
    assert leftovers(str(out)) == []
