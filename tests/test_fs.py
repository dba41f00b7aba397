"""etl.storage.fs: durable local files written with O_DIRECT hold exactly the bytes given; path
arithmetic for local and remote paths; remote reads, listings and errors through the GCS
emulator; Beam's credential lookup skipped for an emulator only."""

from __future__ import annotations

import mmap
import os
import re
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

from etl.base.errors import StorageError
from etl.storage import fs
from etl.storage.direct_file import DirectFile
from tests.helpers import ROOT


def _takes_direct_io(folder: str) -> bool:
    try:
        fd = os.open(os.path.join(folder, "probe"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    except (OSError, AttributeError):
        return False
    os.close(fd)
    return True


@pytest.mark.parametrize("sizes", [[], [1], [4095], [4096], [4097], [3, 5000, 0, 70_000],
                                   [DirectFile.BUFFER - 1, 2], [2 * DirectFile.BUFFER + 123],
                                   # more full buffers than the writer thread has in flight
                                   [3 * DirectFile.BUFFER + 1, DirectFile.BUFFER, 5, 4096],
                                   [(DirectFile.DEPTH + 4) * DirectFile.BUFFER]])
def test_direct_writes_hold_exactly_the_bytes(tmp_path, sizes) -> None:
    parts = [os.urandom(n) for n in sizes]
    path = str(tmp_path / "sub" / "shard.tfrecord")
    with fs.open_write(path, bypass_cache=True) as fh:
        # direct where the file system takes O_DIRECT (ext4, xfs), a synced file otherwise
        assert isinstance(fh, DirectFile) == _takes_direct_io(str(tmp_path))
        for part in parts:
            assert fh.write(memoryview(part)) == len(part)
    with open(path, "rb") as got:
        assert got.read() == b"".join(parts)


def test_refused_direct_io_falls_back_to_a_synced_file(tmp_path, monkeypatch) -> None:
    real_open = os.open

    def no_direct(path, flags, *args):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(22, "Invalid argument")  # what tmpfs answers
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_direct)
    path = str(tmp_path / "shard.tfrecord")
    with fs.open_write(path, bypass_cache=True) as fh:
        assert not isinstance(fh, DirectFile)
        fh.write(b"abc" * 5000)
    with open(path, "rb") as got:
        assert got.read() == b"abc" * 5000


def test_direct_writes_refused_after_open_continue_without_o_direct(tmp_path,
                                                                   monkeypatch) -> None:
    import fcntl

    if not _takes_direct_io(str(tmp_path)):
        pytest.skip("this file system refuses O_DIRECT at open already")
    real_write = os.write
    refused = []
    buffered: list[int] = []

    def refuse_direct(fd, data):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(fd)
            raise OSError(22, "Invalid argument")  # some FUSE file systems
        buffered.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", refuse_direct)
    path = str(tmp_path / "shard.tfrecord")
    data = os.urandom(DirectFile.BUFFER + 10)
    with fs.open_write(path, bypass_cache=True) as fh:
        fh.write(data)
    assert len(refused) == 1
    with open(path, "rb") as got:
        assert got.read() == data
    # through the page cache now, so in WRITE_SLICE pieces: the full buffer, then the padded
    # last block (truncated to the true size before the fsync)
    assert buffered == [fs.WRITE_SLICE] * (DirectFile.BUFFER // fs.WRITE_SLICE) + [DirectFile.BLOCK]


@pytest.mark.parametrize("fail_at", [1, 3])
def test_a_failed_write_in_the_writer_thread_reaches_the_caller_naming_the_file(
        tmp_path, monkeypatch, fail_at) -> None:
    """The disk filling up under the writer thread (the 1st or 3rd 4 MiB write): the caller's
    next write or its close raises StorageError naming the shard, and the file is closed."""
    if not _takes_direct_io(str(tmp_path)):
        pytest.skip("this file system refuses O_DIRECT")
    real_write, calls, closed = os.write, [], []
    real_close = os.close

    def disk_full(fd, data):
        calls.append(len(data))
        if len(calls) == fail_at:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", disk_full)
    monkeypatch.setattr(os, "close", lambda fd: (closed.append(fd), real_close(fd))[1])
    path = str(tmp_path / "shard.tfrecord")
    with pytest.raises(StorageError, match=r"shard\.tfrecord: writing failed: .*ENOSPC"):
        with fs.open_write(path, bypass_cache=True) as fh:
            assert isinstance(fh, DirectFile)
            for _ in range(8):
                fh.write(b"x" * DirectFile.BUFFER)
    assert len(closed) == 1
    assert len(calls) == fail_at  # nothing written after the failure


@pytest.mark.parametrize("size", [0, 1, fs.WRITE_SLICE - 1, fs.WRITE_SLICE, 3 * fs.WRITE_SLICE + 17])
def test_a_local_write_holds_exactly_the_bytes_of_any_buffer(tmp_path, size) -> None:
    """A write of any size and buffer type (the spills hand over NumPy arrays and Arrow
    buffers) returns its byte count and leaves exactly those bytes, in slices or not."""
    data = os.urandom(size)
    path = str(tmp_path / "run.spill")
    with fs.open_write(path, durable=False) as fh:
        assert fh.write(data) == size
        assert fh.write(pa.py_buffer(data)) == size
        assert fh.write(np.frombuffer(data[: size // 8 * 8], "<u8")) == size // 8 * 8
        assert fh.write(memoryview(data)[1:]) == max(size - 1, 0)
    with open(path, "rb") as got:
        assert got.read() == data + data + data[: size // 8 * 8] + data[1:]


def _pmd_mapped_kib(path: str) -> int:
    """KiB of `path` mapped with 2 MiB page-table entries once all of it is read through a
    mapping: what the page cache holds of it in whole 2 MiB folios (/proc/self/smaps)."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as m:
        for at in range(0, len(m), 4096):
            m[at]
        total, inside = 0, False
        with open("/proc/self/smaps", encoding="ascii", errors="replace") as smaps:
            for line in smaps:
                if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                    inside = line.rstrip().endswith(" " + path)
                elif inside and line.startswith("FilePmdMapped:"):
                    total += int(line.split()[1])
    return total


def test_a_large_write_leaves_no_2_mib_page_cache_folios(tmp_path) -> None:
    """A 16 MiB spill written in one call reaches the kernel in slices of at most 1 MiB, so
    the page cache holds it in small folios: 2 MiB ones come from the free blocks a VM hands
    back to its host, every byte of which the host faults in again (benchmarks/README.md)."""
    data = os.urandom(16 << 20)
    whole = str(tmp_path / "one-write")
    fd = os.open(whole, os.O_WRONLY | os.O_CREAT)
    try:
        assert os.write(fd, data) == len(data)
    finally:
        os.close(fd)
    if not _pmd_mapped_kib(whole):
        pytest.skip("this kernel's page cache makes no 2 MiB folios for this file system")
    path = str(tmp_path / "run.spill")
    with fs.open_write(path, durable=False) as fh:
        fh.write(data)
    assert _pmd_mapped_kib(path) == 0
    with open(path, "rb") as got:
        assert got.read() == data


# ---- paths: local and remote alike, no store needed ---------------------------------------------
@pytest.mark.parametrize(("path", "remote"), [
    ("gs://b/x", True), ("s3://b/x", True), ("azfs://acct/c/x", True), ("/data/x.csv", False),
    ("data/x.csv", False), ("data/gs://x", False), ("", False)])
def test_is_remote_means_a_scheme_at_the_start(path: str, remote: bool) -> None:
    assert fs.is_remote(path) is remote


def test_remote_path_arithmetic() -> None:
    assert fs.dirname("gs://b/jobs/job.yaml") == "gs://b/jobs"
    assert fs.dirname("gs://b/job.yaml") == "gs://b"
    assert fs.dirname("gs://b/jobs/") == "gs://b/jobs"  # as os.path.dirname("/b/jobs/")
    assert fs.dirname("gs://b") == "gs://b"
    assert fs.basename("gs://b/jobs/job.yaml") == "job.yaml"
    assert fs.abspath("gs://b/x") == "gs://b/x"
    assert fs.join("gs://b/out", "a", "b.json") == "gs://b/out/a/b.json"
    assert fs.join("gs://b/out/", "x") == "gs://b/out/x"


@pytest.mark.parametrize(("base", "path", "want"), [
    ("gs://b/jobs", "data/*.csv", "gs://b/jobs/data/*.csv"),
    ("gs://b/jobs", "../data/x.csv", "gs://b/data/x.csv"),
    ("gs://b/jobs/", "./a/../x.csv", "gs://b/jobs/x.csv"),
    ("gs://b", "x.csv", "gs://b/x.csv"),
    ("gs://b/jobs", "gs://other/x.csv", "gs://other/x.csv"),
    ("gs://b/jobs", "/abs/x.csv", "/abs/x.csv"),
    ("/work/jobs", "../data/x.csv", "/work/data/x.csv"),
    ("/work/jobs", "s3://b/x.csv", "s3://b/x.csv"),
])
def test_resolve_against_a_local_or_remote_folder(base: str, path: str, want: str) -> None:
    assert fs.resolve(base, path) == want


@pytest.mark.parametrize("path", ["../../other/x.csv", "../.."])
def test_resolve_never_leaves_the_bucket(path: str) -> None:
    with pytest.raises(ValueError, match=r"leaves the bucket 'b'"):
        fs.resolve("gs://b/jobs", path)


def test_open_local_log_appends_and_refuses_remote(tmp_path) -> None:
    path = str(tmp_path / "logs" / "run.log")
    for text in ("one\n", "two\n"):
        with fs.open_local_log(path) as fh:
            fh.write(text)
    assert fs.read_text(path) == "one\ntwo\n"
    with pytest.raises(ValueError, match="must be local"):
        fs.open_local_log("gs://b/run.log")


def test_expand_matches_like_beam_locally(tmp_path) -> None:
    """The same matcher as for buckets: `*` stays in its folder, dot files match."""
    for name in ("a.csv", ".h.csv", "sub/b.csv", "c.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x")
    assert fs.expand(str(tmp_path / "*.csv")) == [str(tmp_path / ".h.csv"), str(tmp_path / "a.csv")]
    assert fs.expand([str(tmp_path / "**.csv"), str(tmp_path / "a.csv")]) == [
        str(tmp_path / ".h.csv"), str(tmp_path / "a.csv"), str(tmp_path / "sub/b.csv")]
    assert fs.expand(str(tmp_path / "none-*.csv")) == []


# ---- remote files through the GCS emulator ------------------------------------------------------
@pytest.mark.slow
def test_remote_read_write_match_isdir(gcs_bucket: str) -> None:
    fs.write_bytes(f"{gcs_bucket}/d/a.bin", b"abc")
    fs.write_bytes(f"{gcs_bucket}/d/sub/b.txt", "é\n".encode())
    assert fs.read_bytes(f"{gcs_bucket}/d/a.bin") == b"abc"
    assert fs.read_text(f"{gcs_bucket}/d/sub/b.txt") == "é\n"
    assert fs.match(f"{gcs_bucket}/d/*") == [(f"{gcs_bucket}/d/a.bin", 3)]
    assert fs.expand(f"{gcs_bucket}/d/**") == [f"{gcs_bucket}/d/a.bin", f"{gcs_bucket}/d/sub/b.txt"]
    assert fs.isdir(f"{gcs_bucket}/d") and fs.isdir(f"{gcs_bucket}/d/sub/")
    assert not fs.isdir(f"{gcs_bucket}/d/a.bin") and not fs.isdir(f"{gcs_bucket}/e")
    assert not fs.isdir("gs://no-such-bucket-fs/x")
    assert fs.exists(f"{gcs_bucket}/d/a.bin") and not fs.exists(f"{gcs_bucket}/d")


@pytest.mark.slow
def test_missing_remote_objects_raise_file_not_found(gcs_bucket: str) -> None:
    for path in (f"{gcs_bucket}/nope.yaml", "gs://no-such-bucket-fs/x.yaml"):
        with pytest.raises(FileNotFoundError) as e:
            fs.read_text(path)
        assert e.value.filename == path


def _credentials_state(env: dict[str, str]) -> str:
    code = ("from etl.storage import fs; fs._fs(); from apache_beam.internal.gcp import auth; "
            "print(auth._Credentials._credentials_init, auth._Credentials._credentials)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_beams_credential_lookup_is_skipped_only_for_an_emulator() -> None:
    """With STORAGE_EMULATOR_HOST, Beam is told there are no credentials (its lookup would
    wait ~25 s per process); without it Beam's own lookup stays untouched."""
    env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
    assert _credentials_state(env) == "False None"
    assert _credentials_state({**env, "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"}) == "True None"


@pytest.mark.slow
def test_remote_gs_access_in_a_fresh_process_takes_seconds(gcs_emulator, gcs_bucket: str) -> None:
    fs.write_bytes(f"{gcs_bucket}/x.bin", b"12345")
    code = f"from etl.storage import fs; print(fs.read_bytes('{gcs_bucket}/x.bin').decode())"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=gcs_emulator.env(),
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert (done.returncode, done.stdout) == (0, "12345\n"), done.stderr
    assert time.monotonic() - started < 15  # ~25 s more with Beam's credential lookup


def test_local_glob_matches_beams_matcher(tmp_path) -> None:
    """fs.expand lists local files without importing Beam; it must list exactly what Beam's
    own matcher lists, for every kind of pattern a job may hold."""
    from apache_beam.io.filesystems import FileSystems

    names = ["a.csv", "b.csv", ".hidden.csv", "c.txt", "sub/d.csv", "sub/deep/e.csv",
             "sub/.h/f.csv", "x[1].csv", "weird name.csv", "q1.csv", "q22.csv", "2026-11-21/g.csv"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("id\n1\n")
    root = str(tmp_path)
    patterns = ["*.csv", "**.csv", "**/*.csv", "sub/*", "sub/**", "sub/", "q?.csv", "q*.csv",
                "[ab].csv", "[!ab].csv", "x[1].csv", "a.csv", "sub", "missing/*.csv",
                "nope.csv", "*/g.csv", "2026-11-*/*.csv", "weird*"]
    for pattern in patterns:
        full = os.path.join(root, pattern)
        beam = sorted(m.path for m in FileSystems.match([full])[0].metadata_list)
        assert fs.expand(full) == beam, pattern
    assert fs.expand(os.path.join(root, "*.csv")) == [
        os.path.join(root, n) for n in (".hidden.csv", "a.csv", "b.csv", "q1.csv", "q22.csv",
                                        "weird name.csv", "x[1].csv")]
