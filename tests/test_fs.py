"""Local file writing: durable files written with O_DIRECT hold exactly the bytes given."""

from __future__ import annotations

import os

import pytest

from etl import fs
from etl.fs import _DirectFile


def _takes_direct_io(folder: str) -> bool:
    try:
        fd = os.open(os.path.join(folder, "probe"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    except (OSError, AttributeError):
        return False
    os.close(fd)
    return True


@pytest.mark.parametrize("sizes", [[], [1], [4095], [4096], [4097], [3, 5000, 0, 70_000],
                                   [_DirectFile.BUFFER - 1, 2], [2 * _DirectFile.BUFFER + 123]])
def test_direct_writes_hold_exactly_the_bytes(tmp_path, sizes) -> None:
    parts = [os.urandom(n) for n in sizes]
    path = str(tmp_path / "sub" / "shard.tfrecord")
    with fs.open_write(path, bypass_cache=True) as fh:
        # direct where the file system takes O_DIRECT (ext4, xfs), a synced file otherwise
        assert isinstance(fh, _DirectFile) == _takes_direct_io(str(tmp_path))
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
        assert not isinstance(fh, _DirectFile)
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

    def refuse_direct(fd, data):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(fd)
            raise OSError(22, "Invalid argument")  # some FUSE file systems
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", refuse_direct)
    path = str(tmp_path / "shard.tfrecord")
    data = os.urandom(_DirectFile.BUFFER + 10)
    with fs.open_write(path, bypass_cache=True) as fh:
        fh.write(data)
    assert len(refused) == 1
    with open(path, "rb") as got:
        assert got.read() == data
