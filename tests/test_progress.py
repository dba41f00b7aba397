"""Progress on every run: a live bar under a pseudo-terminal, plain lines when piped, none on
request; the runner-metrics feed (the local runner's real counters after a run, and the live
polling path with a scripted result); the model's percent and ETA on exact numbers."""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest

from benchmarks.data import write_csv
from etl.job.read_plan import byte_bounds
from etl.output.manifest import load_manifest
from etl.run.progress import READ_SHARE, ProgressConfig, Snapshot, Tally, TaskBytes, format_line
from etl.sources.base import Split
from tests.helpers import IDS_SCHEMA, ROOT, RUN, cli, wait_paused

ROWS = 500_000
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


@pytest.fixture(scope="module")
def big_job(tmp_path_factory) -> tuple[str, str]:
    """A generated CSV of 500k rows (45 MB, deterministic) and its job file; (job, output)."""
    d = tmp_path_factory.mktemp("progress")
    data = str(d / "data.csv")
    write_csv(data, ROWS)
    job = d / "job.yaml"
    job.write_text(f"schema: {ROOT}/schemas/bench_csv.yaml\n"
                   f"source: {{format: csv, paths: [{data}]}}\n"
                   f"output: {d / 'out'}\nshards: 4\n")
    return str(job), str(d / "out")


def _screen(raw: str) -> list[str]:
    """What the terminal showed, redraw by redraw: escape codes out, one entry per line."""
    return [line for line in ANSI.sub("", raw).replace("\r", "\n").split("\n") if line.strip()]


@pytest.mark.slow
def test_bar_under_a_pseudo_terminal(big_job, tmp_path) -> None:
    """The bar under `script`'s pseudo-terminal. The run is held at the `write` pause point
    for five of the bar's 0.2 s ticks: the shard-writing stage is shown however fast it is
    (it once ended between two ticks on CI)."""
    job, out = big_job
    cmd = shlex.join([sys.executable, RUN, "run", job, "--force", "--direct_num_workers=1"])
    env = {**os.environ, "ETL_PAUSE_AT": "write", "ETL_PAUSE_DIR": str(tmp_path)}
    proc = subprocess.Popen(["script", "-qfec", cmd, "/dev/null"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    wait_paused(proc, tmp_path, "write")
    time.sleep(1.0)  # held: the bar renders the writing stage on its next ticks
    (tmp_path / "write.go").touch()
    stdout, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, stdout[-3000:]
    lines = _screen(stdout)
    bars = [ln for ln in lines if "━" in ln]
    percents = {m.group(1) for ln in bars for m in [re.search(r"(\d+\.\d)%", ln)] if m}
    assert len(percents) >= 3, bars  # the bar moved
    assert "100.0" in percents
    stages = {ln.split()[0] for ln in bars}
    assert {"reading+encoding", "writing", "done"} <= stages, stages
    assert any(re.search(r"ETA \d+:\d\d", ln) for ln in bars)
    details = [ln for ln in lines if " read · " in ln]
    assert f"{ROWS:,} read · {ROWS:,} written" in details[-1]  # the final state, exact
    assert len({ln.split(" read")[0] for ln in details}) >= 3  # counts moved
    # the summary follows the bar
    text = "\n".join(lines)
    assert text.index("done ") < text.index(f"Wrote {out} in ")
    assert f"  train           {ROWS:,} records in 4 shard(s)," in text
    assert f"read {ROWS:,} records (" in text and ", rejected 0 in " in text


def _run_held_until_lines(job: str, pause_dir: str, lines_wanted: int) -> tuple[int, str, str]:
    """Run with its stderr piped, held at the `write` pause point until `lines_wanted` plain
    progress lines arrived: a fast machine finishes 500k rows before the second line is due,
    so the run is held rather than hoping it is slow. (returncode, stdout, stderr)."""
    env = {**os.environ, "ETL_PAUSE_AT": "write", "ETL_PAUSE_DIR": pause_dir}
    proc = subprocess.Popen([sys.executable, RUN, "run", job, "--force", "--progress-every",
                             "0.5", "--direct_num_workers=1"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None and proc.stdout is not None
    err: list[str] = []
    reached, go = os.path.join(pause_dir, "write.reached"), os.path.join(pause_dir, "write.go")
    deadline = time.monotonic() + 240
    while not (os.path.exists(reached) and len(err) >= lines_wanted):
        assert time.monotonic() < deadline and proc.poll() is None, err
        line = proc.stderr.readline()  # a line comes every 0.5 s while the run lives
        if line:
            err.append(line)
    open(go, "w").close()
    out, rest = proc.communicate(timeout=240)
    return proc.returncode, out, "".join(err) + rest


@pytest.mark.slow
def test_plain_lines_when_piped_and_none_on_request(big_job, tmp_path) -> None:
    job, out = big_job
    code, stdout, stderr = _run_held_until_lines(job, str(tmp_path), 2)
    assert code == 0, stderr
    lines = stderr.splitlines()
    assert len(lines) >= 2 and all(ln.startswith("progress: ") for ln in lines), lines
    assert "\x1b[" not in stderr  # plain text, no terminal codes
    read = [int(m.group(1).replace(",", "")) for ln in lines
            for m in [re.search(r"([\d,]+) read, ", ln)] if m]
    assert read == sorted(read) and len(read) == len(lines)
    assert all("elapsed " in ln for ln in lines)
    assert stdout.startswith(f"Wrote {out} in ")
    proc = cli("run", job, "--force", "--progress", "none", "--progress-every", "0.2",
               "--direct_num_workers=1", timeout=240)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@dataclass
class _Key:
    metric: object


@dataclass
class _Name:
    name: str


@dataclass
class _Counter:
    key: _Key
    committed: int | None
    attempted: int | None


class _ScriptedResult:
    """Stands in for a Dataflow PipelineResult (Dataflow is not reachable here): every
    metrics query returns the next step of a script, as a running job's counters grow."""

    def __init__(self, steps: list[dict[str, int]]):
        self.steps, self.calls = steps, 0

    def metrics(self) -> _ScriptedResult:
        return self

    def query(self, _filter: object) -> dict[str, list[_Counter]]:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        return {"counters": [_Counter(_Key(_Name(k)), None, v) for k, v in step.items()],
                "distributions": [], "gauges": []}


def test_metrics_feed_polls_a_running_job() -> None:
    from transforms.progress_feed import MetricsFeed, Reporter  # noqa: PLC0415

    steps = [{"records_read": 1000 * i, "bytes_read": 100 * i, "records_encoded": 1000 * i}
             for i in range(1, 6)]
    steps += [{"records_read": 5000, "bytes_read": 500, "records_encoded": 5000,
               "records_written": 2500, "shards_written": 1}]
    feed = MetricsFeed(_ScriptedResult(steps), 1000)
    first = feed.snapshot(2.0, "starting")
    assert (first.stage, first.read, first.bytes_done, first.written) == \
        ("reading+encoding", 1000, 100, 0)
    assert first.percent == pytest.approx(100 * READ_SHARE * 0.1)
    # the reporter thread polls it while the main thread waits (wait_until_finish)
    stream = io.StringIO()
    result = _ScriptedResult(steps)
    reporter = Reporter(ProgressConfig("lines", stream, every=0.05), MetricsFeed(result, 1000))
    deadline = time.monotonic() + 30
    while result.calls < len(steps) + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    reporter.stop(final=False)
    lines = stream.getvalue().splitlines()
    read = [int(re.search(r"([\d,]+) read", ln).group(1).replace(",", "")) for ln in lines]
    assert read == sorted(read) and read[0] < 5000 and read[-1] == 5000, lines
    assert "writing shards" in lines[-1] and "2,500 written" in lines[-1]
    assert "500 B of 1.0 KB" in lines[-1]


@pytest.mark.slow
def test_metrics_feed_reads_the_local_runners_counters(tmp_path, monkeypatch) -> None:
    """multi_processing: no shared memory, so the run is watched on the clock and the runner's
    real result is read once p.run() returns: its counters equal the manifest's."""
    from cli.run import run_job  # noqa: PLC0415
    from etl.job.config import load_job  # noqa: PLC0415
    from transforms import progress_feed as live  # noqa: PLC0415

    feeds: list[live.MetricsFeed] = []

    class Recorded(live.MetricsFeed):
        def __init__(self, *a: object) -> None:
            super().__init__(*a)
            feeds.append(self)

    monkeypatch.setattr(live, "MetricsFeed", Recorded)
    lines = [f"{i},{i % 7},{'x' if i % 50 == 0 else i / 4}" for i in range(400)]
    (tmp_path / "d.csv").write_text("id,a,b\n" + "\n".join(lines) + "\n")
    (tmp_path / "s.yaml").write_text("name: t\nkind: example\nfeatures:\n"
                                     "  id: {dtype: int64, shape: []}\n"
                                     "  x: {dtype: float32, shape: [2], source: [a, b]}\n")
    (tmp_path / "job.yaml").write_text("schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\n"
                                       "output: out\nshards: 2\nmax_bad_fraction: 0.1\n")
    stream = io.StringIO()
    job = load_job(str(tmp_path / "job.yaml"))
    result = run_job(job, ["--direct_running_mode=multi_processing", "--direct_num_workers=1"],
                     progress=ProgressConfig("lines", stream, every=3600))
    manifest = load_manifest(str(tmp_path / "out"))
    assert len(feeds) == 1
    c = feeds[0].counters()
    assert c["records_read"] == sum(i["read"] for i in manifest["inputs"]) == 400
    assert c["records_rejected"] == manifest["rejected"]["num_records"] == 8
    assert c["records_written"] == sum(v["num_records"] for v in manifest["splits"].values()) == 392
    assert c["shards_written"] == 2
    assert c["bytes_read"] == os.path.getsize(tmp_path / "d.csv")
    assert result.splits["train"]["num_records"] == 392
    assert stream.getvalue() == ""  # no line within the hour


def test_model_math_on_exact_numbers() -> None:
    s = Snapshot(elapsed=30.0, stage="reading+encoding", bytes_total=1000, read=400,
                 written=0, rejected=2, encoded=398, bytes_done=250)
    assert s.fraction == pytest.approx(READ_SHARE * 0.25)
    assert s.percent == pytest.approx(100 * READ_SHARE * 0.25)
    f = READ_SHARE * 0.25
    assert s.eta == pytest.approx(30.0 * (1 - f) / f)
    assert s.rate == pytest.approx(400 / 30.0)
    w = Snapshot(10.0, "writing shards", 1000, read=400, written=199, rejected=0, encoded=398,
                 bytes_done=1000)
    assert w.fraction == pytest.approx(READ_SHARE + (1 - READ_SHARE) * 0.5)
    assert Snapshot(5.0, "publishing", 1000).fraction == 1.0
    assert Snapshot(5.0, "publishing", 1000).eta == 0.0
    assert Snapshot(5.0, "reading+encoding", 1000, bytes_done=0).eta is None
    assert Snapshot(5.0, "running", 1000).percent is None  # multi-process: counts unknown
    assert format_line(s) == ("progress:  20.0% reading+encoding, 400 read, 0 written, "
                              "2 rejected, 13 records/s, 250 B of 1.0 KB, elapsed 0:30, "
                              "ETA 2:00")
    # a task's bytes: blocks advance it within its range, the end credits the rest exactly
    t = TaskBytes(100, 300)
    assert [t.advance(x) for x in (50, 150, 140, None, 999)] == [0, 50, 0, 0, 150]
    assert t.finish() == 0
    t = TaskBytes(100, 300)
    assert (t.advance(180), t.finish()) == (80, 120)
    # the tasks of a unit tile its bytes: byte splits by start, record splits by offset
    assert byte_bounds([Split("f", 0, 3, 0, 40), Split("f", 1, 3, 40, 90),
                        Split("f", 2, 3, 90, None)], 120) == [0, 40, 90, 120]
    assert byte_bounds([Split("f", 0, 2, 0, 10, offset=16), Split("f", 1, 2, 10, None,
                                                                 offset=16 + 10 * 784)],
                       16 + 20 * 784) == [0, 16 + 7840, 16 + 15680]
    tally = Tally()
    tally.stage("writing shards")
    tally.stage("reading+encoding")  # a late read task does not move the run back
    tally.add(read=5, bytes=7)
    tally.add(read=1)
    assert tally.counts() == ("writing shards", {"read": 6, "rejected": 0, "encoded": 0,
                                                 "written": 0, "shards": 0, "bytes": 7})


# ---- bytes per block: image folders, gzip inputs; log lines above the bar ------------------
def _bytes_steps(job_path: str, monkeypatch) -> tuple[list[int], dict[str, int]]:
    """Run a job in this process (the local runner's in-memory mode: the DoFns add to the
    run's live tally) and record every `bytes` the read stage credits; (steps, counts)."""
    from cli.run import run_job  # noqa: PLC0415
    from etl.job.config import load_job  # noqa: PLC0415

    steps: list[int] = []
    tallies: list[Tally] = []
    add = Tally.add

    def recording(self: Tally, **counts: int) -> None:
        if counts.get("bytes"):
            steps.append(int(counts["bytes"]))
        if self not in tallies:
            tallies.append(self)
        add(self, **counts)

    monkeypatch.setattr(Tally, "add", recording)
    run_job(load_job(job_path), ["--direct_num_workers=1"],
            progress=ProgressConfig("lines", io.StringIO(), every=3600))
    assert len(tallies) == 1
    return steps, tallies[0].counts()[1]


@pytest.mark.slow
def test_image_folder_bytes_are_its_image_files(tmp_path, monkeypatch) -> None:
    """A folder is one read unit: its bytes are its image files' (not a directory entry's),
    credited block by block as the files are read."""
    from PIL import Image  # noqa: PLC0415

    from etl.job.read_plan import plan_units  # noqa: PLC0415
    from etl.sources import make_reader  # noqa: PLC0415

    root = tmp_path / "imgs"
    for i in range(10):  # PNGs of different sizes (noise compresses less than flat colour)
        d = root / ("cat" if i % 2 else "dog")
        d.mkdir(parents=True, exist_ok=True)
        pixels = np.random.default_rng(i).integers(0, 1 + 25 * i, (6, 5, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(d / f"{i:02d}.png")
    files = sorted(str(p) for p in root.glob("*/*.png"))
    sizes = [os.path.getsize(f) for f in files]
    cfg = {"format": "images", "paths": [str(root)], "block_rows": 3}
    plan = plan_units({"pics": cfg}, str(tmp_path))
    assert [(u.path, u.num_bytes) for u in plan.units] == [(str(root), sum(sizes))]
    assert plan.inputs == [{"path": f, "num_bytes": s} for f, s in zip(files, sizes, strict=True)]
    reader = make_reader(cfg, str(tmp_path), "t")
    ends = [b.end_offset for b in reader.read(str(root))]
    assert ends == [sum(sizes[:3]), sum(sizes[:6]), sum(sizes[:9]), sum(sizes)]
    # a run: the tally's bytes are the folder's, in one step per block
    (tmp_path / "s.yaml").write_text("name: t\nkind: example\nfeatures:\n"
                                     "  image: {dtype: uint8, shape: [6, 5, 3], encoding: png}\n"
                                     "  label: {dtype: string, shape: []}\n")
    (tmp_path / "job.yaml").write_text(f"schema: s.yaml\nsource: {{format: images, paths: "
                                       f"[{root}], block_rows: 3}}\noutput: out\nshards: 1\n")
    steps, counts = _bytes_steps(str(tmp_path / "job.yaml"), monkeypatch)
    assert steps == [sizes[0] + sizes[1] + sizes[2], sum(sizes[3:6]), sum(sizes[6:9]), sizes[9]]
    assert counts["bytes"] == sum(sizes) and counts["read"] == 10


@pytest.mark.slow
def test_gzip_csv_and_idx_bytes_move_within_a_file(tmp_path, monkeypatch) -> None:
    """gzip inputs: progress follows the compressed bytes (what the total counts), block by
    block, and ends exactly at the compressed size."""
    import gzip  # noqa: PLC0415

    rows = "".join(f"{i},{i % 7},{(i * 13) % 101 / 4}\n" for i in range(30_000))
    data = tmp_path / "d.csv.gz"
    data.write_bytes(gzip.compress(("id,a,b\n" + rows).encode(), mtime=0))
    (tmp_path / "s.yaml").write_text("name: t\nkind: example\nfeatures:\n"
                                     "  id: {dtype: int64, shape: []}\n"
                                     "  x: {dtype: float32, shape: [2], source: [a, b]}\n")
    (tmp_path / "job.yaml").write_text("schema: s.yaml\nsource: {format: csv, paths: "
                                       "[d.csv.gz], block_rows: 4000}\noutput: out\nshards: 2\n")
    steps, counts = _bytes_steps(str(tmp_path / "job.yaml"), monkeypatch)
    size = os.path.getsize(data)
    assert len(steps) >= 5 and all(s > 0 for s in steps), steps  # 8 blocks, not one jump
    assert sum(steps) == counts["bytes"] == size and counts["read"] == 30_000
    assert max(steps) < size / 2
    manifest = load_manifest(str(tmp_path / "out"))
    assert sum(v["num_records"] for v in manifest["splits"].values()) == 30_000
    # the bundled demo (gzip IDX) read in blocks of 100 records: the images file moves in
    # steps, each file ends on its compressed size
    with open(os.path.join(ROOT, "examples", "demo.yaml")) as fh:
        text = fh.read()
    data_dir = os.path.join(ROOT, "examples", "data")
    text = text.replace("data/", data_dir + "/").replace("../schemas/",
                                                         os.path.join(ROOT, "schemas") + "/")
    text = text.replace("format: idx,", "format: idx, block_rows: 100,")
    text = text.replace("output: ../out/demo", f"output: {tmp_path / 'demo'}")
    assert text.count("block_rows: 100") == 2 and str(tmp_path) in text
    (tmp_path / "demo.yaml").write_text(text)
    steps, counts = _bytes_steps(str(tmp_path / "demo.yaml"), monkeypatch)
    train = os.path.getsize(os.path.join(data_dir, "digits-train-images-idx3-ubyte.gz"))
    test = os.path.getsize(os.path.join(data_dir, "digits-test-images-idx3-ubyte.gz"))
    assert counts["bytes"] == sum(steps) == train + test and counts["read"] == 1797
    assert len(steps) == 15 + 3, steps  # 1500 and 297 records in blocks of 100
    assert max(steps) < train / 10


@pytest.mark.slow
def test_a_warning_while_the_bar_is_live_prints_whole_above_it(tmp_path) -> None:
    """A log record emitted while the bar is on screen (here the manifest's note on a raised
    shard count, logged while the run is checked) is printed on its own line, intact, and
    the bar goes on below it."""
    rows = "".join(f"{i},{i % 7},{i / 4}\n" for i in range(20_000))
    (tmp_path / "d.csv").write_text("id,a,b\n" + rows)
    (tmp_path / "s.yaml").write_text(IDS_SCHEMA)
    (tmp_path / "job.yaml").write_text("schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\n"
                                       "output: out\nshards: 1\nmax_shard_bytes: 100KB\n")
    cmd = shlex.join([sys.executable, RUN, "run", str(tmp_path / "job.yaml"),
                      "--direct_num_workers=1"])
    proc = subprocess.run(["script", "-qfec", cmd, "/dev/null"], capture_output=True,
                          text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    notes = load_manifest(str(tmp_path / "out"))["notes"]
    assert len(notes) == 1 and "max_shard_bytes; using " in notes[0], notes
    lines = _screen(proc.stdout)
    warning = f"WARNING {notes[0]}"
    assert warning in lines, [ln for ln in lines if "max_shard_bytes" in ln]
    at = lines.index(warning)
    assert any("━" in ln for ln in lines[:at]) and any("━" in ln for ln in lines[at + 1:])
    assert sum("max_shard_bytes" in ln for ln in lines) == 1  # printed once, never redrawn
