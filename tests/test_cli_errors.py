"""Clean errors and exit codes as a user sees them: wrong-typed job values, missing inputs,
an unwritable output location, and failures raised inside Beam workers arrive as one line
with the right exit code; the traceback only with --debug, and always in the run's log."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap

import pytest

from etl.base.errors import BadInputError, ConfigError, EtlError, RecordError, StorageError
from etl.base.units import parse_duration
from etl.base.worker_errors import original_error, storage_error, wire_errors, worker_errors
from etl.job.config import job_from_dict
from tests.helpers import IDS_SCHEMA as SCHEMA
from tests.helpers import cli

BASE = {"schema": "s.yaml", "source": {"format": "csv", "paths": ["d.csv"]}, "output": "out"}


def lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def project(tmp_path, job: str, rows: int = 50) -> str:
    (tmp_path / "s.yaml").write_text(SCHEMA)
    (tmp_path / "d.csv").write_text("id,a,b\n" + "".join(f"{i},{i},{i}\n" for i in range(rows)))
    (tmp_path / "job.yaml").write_text(textwrap.dedent(job))
    return str(tmp_path / "job.yaml")


@pytest.mark.parametrize("key,value,message", [
    ("max_bad_fraction", "lots", "max_bad_fraction must be a number, got 'lots'"),
    ("max_bad_fraction", 1.5, "max_bad_fraction must be within [0, 1], got 1.5"),
    ("shuffle", {"seed": "abc"}, "shuffle.seed must be an integer, got 'abc'"),
    ("shuffle", {"seed": True}, "shuffle.seed must be an integer, got True"),
    ("shards", "two", "shards must be a positive integer, got 'two'"),
    ("shards", True, "shards must be a positive integer, got True"),
    ("shards", -3, "shards must be a positive integer, got -3"),
    ("shard_size", -5, "shard_size: cannot read size '-5'"),
    ("shard_size", "0MB", "shard_size: size must be > 0, got '0MB'"),
    ("max_shard_bytes", "lots", "max_shard_bytes: cannot read size 'lots'"),
    ("max_record_bytes", -1, "max_record_bytes: cannot read size '-1'"),
    ("max_record_bytes", [1], "max_record_bytes: cannot read size [1]"),
    ("spill_in_memory", "-1MB", "spill_in_memory: cannot read size '-1MB'"),
    ("temp_location", 5, "temp_location must be a path (text), got 5"),
    ("output", ["a"], "output must be a path (text), got ['a']"),
    ("schema", 3, "schema must be a path (text), got 3"),
    ("source", "data.csv", "source must be a mapping like {format: csv, paths: [...]}"),
    ("split", {"train": "most"}, "split: train must be a number, got 'most'"),
    ("spill", "memory", "spill: memory was removed because its memory use is unbounded"),
])
def test_wrong_typed_job_values_name_file_and_key(key, value, message) -> None:
    doc = dict(BASE, **{key: value})
    with pytest.raises(ConfigError) as e:
        job_from_dict(doc, path="jobs/train.yaml")
    assert str(e.value).startswith("jobs/train.yaml: ") and message in str(e.value), str(e.value)
    assert e.value.exit_code == 2


def test_good_values_still_read() -> None:
    job = job_from_dict(dict(BASE, shard_size=1.5e6, spill_in_memory=0, max_record_bytes="1MiB",
                             max_bad_fraction=0, spill="disk", shuffle={"seed": -4}))
    assert (job.shard_size, job.spill_in_memory, job.max_record_bytes) == (1_500_000, 0, 2**20)
    assert job.seed == -4 and job.max_bad_fraction == 0.0
    assert job_from_dict(BASE).max_record_bytes == 64 * 2**20
    # spill_in_memory: unset keeps records in memory (placement) but holds no run; 0 neither
    shuffles = [job_from_dict(dict(BASE, **more)).shuffle
                for more in ({}, {"spill_in_memory": 0}, {"spill_in_memory": "1MiB"})]
    assert [(s.spill_in_memory, s.keeps_in_memory, s.held_runs) for s in shuffles] == [
        (None, True, 0), (0, False, 0), (2**20, True, 2**20)]
    assert [parse_duration(v, "x") for v in ("90", "90s", "30m", "1.5h", "2d")] == [
        90, 90, 1800, 5400, 172800]
    with pytest.raises(ConfigError, match="--lock-stale-after: cannot read duration 'soon'"):
        parse_duration("soon", "--lock-stale-after")


@pytest.mark.slow
def test_cli_wrong_typed_value_and_removed_spill_exit_2(tmp_path) -> None:
    job = project(tmp_path, """\
        schema: s.yaml
        source: {format: csv, paths: [d.csv]}
        output: out
        shuffle: {seed: abc}
        """)
    proc = cli("run", job)
    assert proc.returncode == 2
    assert lines(proc.stderr) == [
        f"error: {job}: shuffle.seed must be an integer, got 'abc'"]
    proc = cli("run", job, "--lock-stale-after", "soon")
    assert proc.returncode == 2 and "--lock-stale-after: cannot read duration" in proc.stderr


@pytest.mark.slow
def test_cli_missing_input_exit_2_naming_it(tmp_path) -> None:
    job = project(tmp_path, """\
        schema: s.yaml
        source: {format: csv, paths: [d.csv, more/d2.csv]}
        output: out
        """)
    proc = cli("run", job)
    assert proc.returncode == 2
    assert len(lines(proc.stderr)) == 1 and "Traceback" not in proc.stderr
    assert "more/d2.csv" in proc.stderr and "no input files match" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["d.csv", "job.yaml", "s.yaml"]


def _mount(path: str, options: str) -> bool:
    os.makedirs(path, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path],
                              capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.slow
def test_cli_read_only_output_location_exit_5_before_any_work(tmp_path) -> None:
    ro = str(tmp_path / "ro")
    if os.geteuid() == 0:
        if not _mount(ro, "ro,size=1m"):
            pytest.skip("cannot mount a read-only tmpfs here")
    else:
        os.makedirs(ro)
        os.chmod(ro, 0o555)
    try:
        job = project(tmp_path, f"""\
            schema: s.yaml
            source: {{format: csv, paths: [d.csv]}}
            output: {ro}/sub/out
            """)
        proc = cli("run", job)
        assert proc.returncode == 5, proc.stderr
        assert len(lines(proc.stderr)) == 1
        assert re.fullmatch(rf"error: cannot create the output's parent directory {ro}/sub: "
                            r"(Read-only file system|Permission denied); choose a writable "
                            r"location", lines(proc.stderr)[0]), proc.stderr
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", ro], capture_output=True, timeout=20)


@pytest.mark.slow
def test_cli_not_enough_space_exit_5_with_both_numbers(tmp_path) -> None:
    small = str(tmp_path / "small")
    if os.geteuid() != 0 or not _mount(small, "size=256k"):
        pytest.skip("cannot mount a tmpfs here (check_free_space is unit-tested)")
    try:
        job = project(tmp_path, f"""\
            schema: s.yaml
            source: {{format: csv, paths: [d.csv]}}
            output: {small}/out
            """, rows=40_000)
        size = os.path.getsize(tmp_path / "d.csv")
        proc = cli("run", job)
        assert proc.returncode == 5, proc.stderr
        assert re.fullmatch(
            rf"error: not enough free space for the output {small}/out: \d+\.\d KB free on its "
            rf"file system \({small}\), the inputs total {size / 1000:.1f} KB; free some space "
            r"or choose another location", lines(proc.stderr)[0]), proc.stderr
        assert os.listdir(small) == []
    finally:
        subprocess.run(["umount", small], capture_output=True, timeout=20)


GENERATOR = textwrap.dedent("""\
    def rows(n=100):
        for i in range(n):
            if i == 42:
                raise ValueError("sensor 7 went offline")
            yield {"id": i, "a": 0.5, "b": 1.0}
    """)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["multi_threading", "multi_processing"])
def test_error_inside_a_worker_is_one_line_with_its_exit_code(tmp_path, mode) -> None:
    (tmp_path / "gen_bad.py").write_text(GENERATOR)
    job = project(tmp_path, """\
        schema: s.yaml
        sources: {train: {format: python, function: "gen_bad:rows"}}
        output: out
        """)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = cli("run", job, f"--direct_running_mode={mode}", env=env)
    assert proc.returncode == 3, proc.stderr
    got = lines(proc.stderr)
    assert len(got) == 1 and "Traceback" not in proc.stderr, proc.stderr
    m = re.fullmatch(r"error: python:gen_bad:rows: gen_bad:rows raised ValueError at record 42: "
                     r"sensor 7 went offline \(full log: (\S+\.log)\)", got[0])
    assert m, got[0]
    log = m.group(1)
    assert log.startswith(str(tmp_path / ".out.etl" / "logs") + "/")
    text = open(log).read()
    assert "Traceback" in text and 'raise ValueError("sensor 7 went offline")' in text
    assert not (tmp_path / "out").exists()
    assert os.listdir(tmp_path / ".out.etl") == ["logs"]
    if mode == "multi_threading":
        debug = cli("run", job, "--debug", env=env)
        assert debug.returncode == 3
        assert "Traceback (most recent call last)" in debug.stderr
        assert lines(debug.stderr)[-1].startswith("error: python:gen_bad:rows: gen_bad:rows "
                                                  "raised ValueError at record 42")


def test_original_error_is_found_in_what_runners_raise() -> None:
    """Runners raise RuntimeError(traceback text) or re-raise our class with a suffix."""
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
            "etl.base.errors.RecordError: a.idx: not an IDX file (magic bytes 00 01)\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            "etl.base.errors.RecordError: a.idx: not an IDX file (magic bytes 00 01) "
            "[while running 'Convert/ReadEncodeSpill']\n")
    err = original_error(RuntimeError(text))
    assert type(err) is RecordError and str(err) == "a.idx: not an IDX file (magic bytes 00 01)"
    assert err.exit_code == 3
    wrapped = BadInputError("b.csv:3: unterminated quote [while running 'Convert/X']")
    assert str(original_error(wrapped)) == "b.csv:3: unterminated quote"
    bare = RuntimeError("Traceback...\nOSError: [Errno 28] No space left on device: '/o/x'\n")
    err = original_error(bare)
    assert type(err) is StorageError and err.exit_code == 5
    assert str(err) == ("/o/x: writing failed: no space left on the device; free some space "
                        "or choose another location [errno ENOSPC]")
    assert original_error(RuntimeError("Traceback...\nKeyError: 'x'\n")) is None


def test_worker_wrapper_names_path_and_keeps_our_errors() -> None:
    class Task:
        path = "/data/part-3.csv"

    class Fn:
        @wire_errors
        def process(self, task):
            yield 1
            raise OverflowError("Python int too large to convert to C long")

        @wire_errors
        def full(self, task):
            raise OSError(28, "No space left on device")

        @wire_errors
        def ours(self, task):
            raise RecordError("c.csv:4: bad")

    fn = Fn()
    with pytest.raises(EtlError) as e:
        list(fn.process(Task()))
    assert str(e.value) == ("/data/part-3.csv: unexpected OverflowError: Python int too large "
                            "to convert to C long") and e.value.exit_code == 1
    with pytest.raises(StorageError, match=r"^/data/part-3.csv: reading or writing failed: no "
                                           r"space left on the device"):
        fn.full(Task())
    with pytest.raises(RecordError, match=r"^c.csv:4: bad$"):
        fn.ours(Task())
    with pytest.raises(StorageError, match=r"^/x/y: reading or writing failed: permission denied; "
                                           r"check the permissions"):
        with worker_errors("shard 3"):
            raise PermissionError(13, "Permission denied", "/x/y")
    assert "read-only file system" in str(storage_error(OSError(30, "x"), "/r"))
