"""`inspect --images DIR`: the image features of the records shown, as PNG files whose pixels are
exactly the source's (the demo's IDX digits, converted in input order), named after their
shard and position, listed in each record's block; a DIR holding anything an earlier
`inspect --images` did not write (or changed since) is refused before anything is written;
and the same on a gs:// output with a gs:// DIR (GCS emulator)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import textwrap

import numpy as np
import pytest
from PIL import Image

from etl.contract.schema import load_schema
from etl.output.manifest import dataset_dir
from etl.tools.inspect_output import IMAGES_MARKER, ImagesDirError, image_features, inspect, png_bytes
from tests.gcs_emulator import GcsEmulator
from tests.helpers import ROOT, cli

DATA = os.path.join(ROOT, "examples", "data")
SHARD0 = "test-00000-of-00008"
SHARD1 = "test-00001-of-00008"


def idx_images(split: str) -> np.ndarray:
    """The demo's source images, read straight from the IDX file (magic 0x803, big-endian dims)."""
    with gzip.open(os.path.join(DATA, f"digits-{split}-images-idx3-ubyte.gz")) as fh:
        raw = fh.read()
    assert raw[:4] == b"\x00\x00\x08\x03"
    n, h, w = (int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(3))
    return np.frombuffer(raw, np.uint8, n * h * w, 16).reshape(n, h, w)


def demo_job(folder: str, output: str) -> str:
    """The demo job in input order (`shuffle: false`: contiguous shards), eight shards."""
    os.makedirs(folder, exist_ok=True)
    job = os.path.join(folder, "job.yaml")
    with open(job, "w") as fh:
        json.dump({"schema": os.path.join(ROOT, "schemas", "digits.yaml"), "output": output,
                   "shuffle": False, "shards": 8, "compression": "none",
                   "sources": {split: {"format": "idx", "paths": {
                       "image": os.path.join(DATA, f"digits-{split}-images-idx3-ubyte.gz"),
                       "label": os.path.join(DATA, f"digits-{split}-labels-idx1-ubyte.gz")}}
                       for split in ("train", "test")}}, fh)
    return job


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("inspect")
    out = str(root / "out")
    done = cli("run", demo_job(str(root / "job"), out))
    assert done.returncode == 0, done.stderr
    return out


def pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG"
        return np.asarray(image)


def tree(folder: str) -> dict[str, str]:
    """name -> sha256 of every file in a flat folder (hidden ones too)."""
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as fh:
            out[name] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.mark.slow
def test_pngs_hold_the_source_pixels_named_by_shard_and_position(demo, tmp_path) -> None:
    source = idx_images("test")
    with open(os.path.join(demo, "manifest.json")) as fh:
        shard0 = json.load(fh)["splits"]["test"]["shards"][0]["num_records"]
    images = str(tmp_path / "png")
    # one record past the first shard: the second file's PNGs count from 0 again
    blocks = list(inspect(os.path.join(demo, "test-*.tfrecord"), limit=shard0 + 2,
                          images=images))
    names = [f"{SHARD0}-record{i}-image.png" for i in range(shard0)] + [
        f"{SHARD1}-record{i}-image.png" for i in range(2)]
    assert sorted(os.listdir(images)) == sorted([IMAGES_MARKER, *names])
    for n, name in enumerate(names):  # record n of the split in input order = IDX image n
        with open(os.path.join(images, name), "rb") as fh:
            got = pixels(fh.read())
        assert got.dtype == np.uint8 and got.shape == (8, 8)
        np.testing.assert_array_equal(got, source[n])
    # each record's block ends with the line naming its file; the last block sums up
    records = [b for b in blocks if b.startswith("-- record ")]
    assert len(records) == shard0 + 2
    for n, (block, name) in enumerate(zip(records, names, strict=True)):
        assert block.splitlines()[-1] == (
            f"  image -> {images}/{name} (8x8 grey, values "
            f"{source[n].min()}..{source[n].max()})"), block
    assert blocks[-1] == (f"# wrote {shard0 + 2} PNG file(s) to {images} (image features: "
                          "image; pixels as stored, not rescaled)")
    with open(os.path.join(images, IMAGES_MARKER)) as fh:
        marker = json.load(fh)
    assert marker["files"] == {name: tree(images)[name] for name in names}


@pytest.mark.slow
def test_cli_prints_where_they_went_and_reuses_only_its_own_folder(demo, tmp_path) -> None:
    source = idx_images("train")
    images = str(tmp_path / "png")
    shard = os.path.join(demo, "train-00000-of-00008.tfrecord")
    first = cli("inspect", shard, "--limit", "2", "--images", images)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert [line for line in lines if "->" in line] == [
        f"  image -> {images}/train-00000-of-00008-record{i}-image.png (8x8 grey, values "
        f"{source[i].min()}..{source[i].max()})" for i in range(2)]
    assert lines[-1] == (f"# wrote 2 PNG file(s) to {images} (image features: image; pixels "
                         "as stored, not rescaled)")
    before = tree(images)
    assert sorted(before) == [IMAGES_MARKER] + [
        f"train-00000-of-00008-record{i}-image.png" for i in range(2)]

    # the same folder again: ours, unchanged -> rewritten (same bytes) and one more added
    again = cli("inspect", shard, "--limit", "3", "--images", images)
    assert again.returncode == 0, again.stderr
    after = tree(images)
    assert {k: after[k] for k in before if k != IMAGES_MARKER} == {
        k: v for k, v in before.items() if k != IMAGES_MARKER}
    assert len(after) == 4
    np.testing.assert_array_equal(
        pixels(open(os.path.join(images, "train-00000-of-00008-record2-image.png"), "rb").read()),
        source[2])

    # a PNG of ours edited since: refused, nothing changes
    edited = os.path.join(images, "train-00000-of-00008-record1-image.png")
    with open(edited, "wb") as fh:
        fh.write(png_bytes(np.zeros((8, 8), np.uint8)))
    state = tree(images)
    refused = cli("inspect", shard, "--limit", "2", "--images", images)
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == ""
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: refusing --images {images}: train-00000-of-00008-record1-image.png changed "
        "since `inspect --images` wrote it; choose another folder (or remove it yourself)")
    assert tree(images) == state


@pytest.mark.slow
@pytest.mark.parametrize("occupant", ["notes.txt", "train-00000-of-00008-record0-image.png"])
def test_a_folder_with_files_not_ours_is_refused(demo, tmp_path, occupant) -> None:
    images = tmp_path / "mine"
    images.mkdir()
    (images / occupant).write_bytes(b"my own file")
    refused = cli("inspect", os.path.join(demo, "train-00000-of-00008.tfrecord"), "--limit", "1",
                  "--images", str(images))
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"error: refusing --images {images}: it holds {occupant}, which no `inspect --images` "
        "wrote; choose an empty or new folder (or remove it yourself)"]
    assert tree(str(images)) == {occupant: hashlib.sha256(b"my own file").hexdigest()}
    # a marker of ours beside it does not make a file ours that the marker does not list
    (images / IMAGES_MARKER).write_text(json.dumps({"files": {}}))
    with pytest.raises(ImagesDirError, match=f"it holds {occupant}, which no"):
        list(inspect(os.path.join(demo, "train-00000-of-00008.tfrecord"), limit=1,
                     images=str(images)))


@pytest.mark.slow
def test_other_refusals(demo, tmp_path) -> None:
    shard = os.path.join(demo, "train-00000-of-00008.tfrecord")
    inside = os.path.join(demo, "png")
    with pytest.raises(ImagesDirError, match=f"refusing --images {inside}: it is inside the output "
                                             f"{demo}, whose next run"):
        list(inspect(demo, limit=1, images=inside))
    with pytest.raises(ImagesDirError, match="it is inside the output"):
        list(inspect(shard, limit=1, images=inside))  # a shard's folder with _SUCCESS
    assert not os.path.exists(inside)
    afile = tmp_path / "afile"
    afile.write_bytes(b"x")
    with pytest.raises(ImagesDirError, match=f"refusing --images {afile}: it is a file"):
        list(inspect(shard, limit=1, images=str(afile)))
    with pytest.raises(ImagesDirError, match="no image feature"):
        list(inspect(shard, limit=1, images=str(tmp_path / "png"),
                     schema=os.path.join(ROOT, "schemas", "iris.yaml")))
    raw = tmp_path / "raw"
    raw.mkdir()
    os.link(shard, raw / "x.tfrecord")  # no schema.yaml beside it
    with pytest.raises(ImagesDirError, match="needs the data's schema"):
        list(inspect(str(raw / "x.tfrecord"), limit=1, images=str(tmp_path / "png")))
    assert not os.path.exists(tmp_path / "png")


def test_which_features_are_images_and_their_pngs(tmp_path) -> None:
    schema = tmp_path / "s.yaml"
    schema.write_text(textwrap.dedent("""\
        name: many
        kind: example
        features:
          grey: {dtype: uint8, shape: [4, 5], encoding: raw}
          one: {dtype: uint8, shape: [4, 5, 1]}
          rgb: {dtype: uint8, shape: [3, 2, 3], encoding: png}
          rgba: {dtype: uint8, shape: [3, 2, 4], encoding: raw}
          jpg: {dtype: uint8, shape: [8, 8, 3], encoding: jpeg}
          deep: {dtype: uint16, shape: [3, 2, 1], encoding: png}
          two: {dtype: uint8, shape: [3, 2, 2], encoding: raw}
          deep_rgb: {dtype: uint16, shape: [3, 2, 3], encoding: png}
          floats: {dtype: float32, shape: [4, 4, 1], encoding: raw}
          row: {dtype: uint8, shape: [1, 8], encoding: raw}
          vector: {dtype: uint8, shape: [8], encoding: raw}
          ragged: {dtype: uint8, shape: [-1, 3]}
        """))
    got = [f.name for f in image_features(load_schema(str(schema)))]
    assert got == ["grey", "one", "rgb", "rgba", "jpg", "deep"]
    rng = np.random.default_rng(0)
    for shape, dtype in (((4, 5), np.uint8), ((3, 2, 3), np.uint8), ((3, 2, 4), np.uint8),
                         ((3, 2, 1), np.uint16), ((4, 5, 1), np.uint8)):
        arr = rng.integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)
        back = pixels(png_bytes(arr))
        want = arr[..., 0] if arr.ndim == 3 and arr.shape[2] == 1 else arr
        np.testing.assert_array_equal(back.astype(dtype), want)
        assert png_bytes(arr) == png_bytes(arr.copy())  # same pixels, same bytes (checksums)


@pytest.mark.slow
def test_inspect_a_gs_output_with_images_in_the_bucket(demo, tmp_path,
                                                       gcs_emulator: GcsEmulator,
                                                       gcs_bucket: str) -> None:
    out = f"{gcs_bucket}/data/digits"
    env = gcs_emulator.env()
    done = cli("run", demo_job(str(tmp_path / "job"), out), env=env)
    assert done.returncode == 0, done.stderr
    version = dataset_dir(out)
    assert version != out
    images = f"{gcs_bucket}/looks/png"
    shown = cli("inspect", out, "--limit", "3", "--images", images, env=env)
    assert shown.returncode == 0, shown.stderr
    local = cli("inspect", demo, "--limit", "3", "--images", str(tmp_path / "png"))
    assert local.returncode == 0, local.stderr
    # the same decoded records and the same lines as the local output, paths aside
    assert shown.stdout.startswith(f"# decoded with schema 'digits' ({version}/schema.yaml)\n"
                                   f"== {version}/{SHARD0}.tfrecord\n-- record 0 ")
    assert shown.stdout.replace(version, "OUT").replace(images, "PNG") == local.stdout.replace(
        demo, "OUT").replace(str(tmp_path / "png"), "PNG")
    names = [f"{SHARD0}-record{i}-image.png" for i in range(3)]
    assert gcs_emulator.list(images + "/") == sorted(
        f"{images}/{n}" for n in [IMAGES_MARKER, *names])
    source = idx_images("test")
    for i, name in enumerate(names):
        np.testing.assert_array_equal(pixels(gcs_emulator.download(f"{images}/{name}")), source[i])
    # a bucket folder holding someone else's object is refused as on disk
    gcs_emulator.upload_bytes(b"mine", f"{gcs_bucket}/theirs/notes.txt")
    refused = cli("inspect", out, "--limit", "1", "--images", f"{gcs_bucket}/theirs", env=env)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: refusing --images {gcs_bucket}/theirs: it holds notes.txt, which no "
        "`inspect --images` wrote; choose an empty or new folder (or remove it yourself)")
    assert gcs_emulator.list(f"{gcs_bucket}/theirs/") == [f"{gcs_bucket}/theirs/notes.txt"]
