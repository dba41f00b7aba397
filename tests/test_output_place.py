"""etl.output.place: the one factory where a path becomes an OutputPlace, and both places'
refusal checks, lock and locations asked in-process (the CLI's refusals end to end are in
test_output_refusals.py and test_gcs_publish.py). Local places on tmp dirs; gs:// ones on the
GCS emulator (tests/conftest.py: `gcs_emulator`, `gcs_bucket`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from etl.base.errors import ConfigError, LockedError
from etl.output.layout import MANIFEST, PRODUCER, SUCCESS
from etl.output.local_place import LocalPlace
from etl.output.lock import RunInfo
from etl.output.object_place import ObjectPlace
from etl.output.place import OutputPlace, place_for
from tests.gcs_emulator import GcsEmulator

OURS = json.dumps({"producer": PRODUCER, "format_version": 2}).encode()
POINTER = json.dumps({"producer": PRODUCER, "version": "v1"}).encode()


def publish_fake(folder: Path) -> None:
    """A directory our refusals take for a published output of ours (manifest + _SUCCESS)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).write_bytes(OURS)
    (folder / SUCCESS).write_bytes(b"")


def test_place_for_is_the_one_choice() -> None:
    assert isinstance(place_for("/data/out"), LocalPlace)
    assert isinstance(place_for("out/daily"), LocalPlace)
    assert isinstance(place_for("gs://b/out"), ObjectPlace)
    for path in ("/data/out", "gs://b/out"):
        place: OutputPlace = place_for(path)
        assert place.output == path


def test_local_locations(tmp_path: Path) -> None:
    place = place_for(str(tmp_path / "day" / "out"))
    assert place.history_root == str(tmp_path / "day")
    assert place.quarantine_root == str(tmp_path / "day" / "out.quarantine")
    assert place.version_dir("r1") is None
    assert place.read_without_a_store


def test_local_refusals(tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ConfigError, match="it is an existing file"):
        place_for(str(afile)).check([], cwd=str(tmp_path / "elsewhere"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.csv").write_text("a\n1\n")
    with pytest.raises(ConfigError, match="it holds the input"):
        place_for(str(data)).check([str(data / "in.csv")], cwd=str(tmp_path / "elsewhere"))
    with pytest.raises(ConfigError, match="current directory"):
        place_for(str(tmp_path)).check([], cwd=str(tmp_path / "x"))
    published = tmp_path / "pub"
    publish_fake(published)
    inner = place_for(str(published / "inner"))
    assert inner.published_ancestor() == str(published)
    with pytest.raises(ConfigError, match="it is inside"):
        inner.check([], cwd=str(tmp_path / "elsewhere"))
    outer = place_for(str(tmp_path))
    assert outer.published_inside() == str(published)  # data holds no dataset
    fresh = place_for(str(tmp_path / "fresh"))
    fresh.check([str(data / "in.csv")], cwd=str(tmp_path / "elsewhere"))  # accepted
    assert fresh.published_ancestor() is None


def test_local_hold_is_the_lock(tmp_path: Path) -> None:
    place = place_for(str(tmp_path / "out"))
    info = RunInfo.current("20261127T000000-abcdef-k")
    assert place.lock_holder() is None
    with place.hold(info, 3600, False) as held:
        assert place.lock_holder() == info
        with pytest.raises(LockedError):
            with place.hold(RunInfo.current("20261127T000001-abcdef-k"), 3600, False):
                pass
        assert held.start_run(lambda: True)
        assert os.path.isdir(held.tmp)
        assert place.has_leftover_runs()
        assert held.log_file.endswith("20261127T000000-abcdef-k.log")
        held.remove_run_dir()
    assert place.lock_holder() is None
    assert not place.has_leftover_runs()


@pytest.mark.slow
def test_object_refusals(gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    with pytest.raises(ConfigError, match="a whole bucket"):
        place_for(gcs_bucket).check([])
    out = f"{gcs_bucket}/data/out"
    place = place_for(out)
    assert place.history_root == f"{gcs_bucket}/data"
    assert place.quarantine_root == f"{out}.quarantine"
    assert place.version_dir("r1") == f"{out}/r1"
    assert not place.read_without_a_store
    place.check([f"{gcs_bucket}/in.csv"])  # empty prefix: accepted
    with pytest.raises(ConfigError, match="it holds the input"):
        place.check([f"{out}/in.csv"])
    gcs_emulator.upload_bytes(b"mine", f"{out}/notes.txt")
    with pytest.raises(ConfigError, match="which no run"):
        place.check([])
    gcs_emulator.upload_bytes(POINTER, f"{gcs_bucket}/pub/{SUCCESS}")
    inner = place_for(f"{gcs_bucket}/pub/inner")
    assert inner.published_ancestor() == f"{gcs_bucket}/pub"
    with pytest.raises(ConfigError, match="it is inside"):
        inner.check([])
    assert place_for(gcs_bucket + "/x").published_ancestor() is None
    assert place_for(f"{gcs_bucket}/pub").published_inside() is None
    gcs_emulator.upload_bytes(POINTER, f"{out}/nested/{SUCCESS}")
    assert place.published_inside() == f"{out}/nested"


@pytest.mark.slow
def test_object_hold_is_the_lock(gcs_emulator: GcsEmulator, gcs_bucket: str) -> None:
    place = place_for(f"{gcs_bucket}/out")
    info = RunInfo.current("20261127T000000-abcdef-k")
    assert place.lock_holder() is None
    with place.hold(info, 3600, False) as held:
        assert place.lock_holder() == info
        assert held.published_run() is None
        assert held.start_run(lambda: False)  # the pointer decides: not asked again
        assert not place.has_leftover_runs()
    assert place.lock_holder() is None
