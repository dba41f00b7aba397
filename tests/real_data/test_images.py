"""Images as they come (issue 27, item 6), on scikit-image's bundled photos: every file of a
folder stored, rejected or named as skipped; GIF/BMP/TIFF/WebP through Pillow; images of
any size ([null, null, 3]) stored encoded and decoded to their own size by both readers;
`resize`/`pad` to one fixed size. Every pixel is compared with Pillow's decode of the file."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import skimage
import yaml
from PIL import Image

import etl
from etl.base.errors import ConfigError, SchemaError
from etl.contract.schema import schema_from_dict
from etl.sources import make_reader

pytestmark = pytest.mark.slow  # real data sets end to end: CLI runs and Beam pipelines

DATA = Path(skimage.__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]
PHOTOS = {  # class/file -> skimage file (different sizes, PNG grey and colour, JPEG)
    "space/astronaut.png": "astronaut.png", "space/hubble_deep_field.jpg":
    "hubble_deep_field.jpg", "space/rocket.jpg": "rocket.jpg", "things/camera.png": "camera.png",
    "things/coffee.png": "coffee.png", "animals/chelsea.png": "chelsea.png",
    "animals/tiny.gif": "no_time_for_that_tiny.gif", "things/multipage.tif": "multipage.tif",
}
ANY_SIZE = {"name": "photos", "kind": "example", "features": {
    "image": {"dtype": "uint8", "shape": [None, None, 3], "encoding": "png"},
    "label": {"dtype": "bytes", "shape": []},
    "filename": {"dtype": "bytes", "shape": []}}}


def photo_folder(root: Path) -> Path:
    """The skimage photos as root/<class>/<file>, plus single-frame BMP, TIFF, WebP
    (lossless) and GIF files Pillow makes from them, and two files that are not images."""
    for name, src in PHOTOS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / src, root / name)
    chelsea = Image.open(DATA / "chelsea.png").convert("RGB")
    chelsea.crop((0, 0, 120, 90)).save(root / "animals/chelsea_crop.bmp")
    Image.open(DATA / "coffee.png").convert("RGB").crop((10, 20, 210, 120)).save(
        root / "things/coffee_crop.tif")
    Image.open(DATA / "astronaut.png").convert("RGB").crop((0, 0, 64, 48)).save(
        root / "space/astronaut_crop.webp", lossless=True)
    chelsea.crop((50, 50, 150, 110)).quantize(64).save(root / "animals/chelsea_palette.gif")
    (root / "animals/README.txt").write_text("photos from scikit-image\n")
    (root / "things/.DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    return root


def pillow_rgb(path: Path) -> np.ndarray:
    """What Pillow decodes from the file (its first frame), as RGB."""
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


def run(tmp_path: Path, schema: dict[str, Any], source: dict[str, Any], out: str = "out",
        **job: Any) -> subprocess.CompletedProcess[str]:
    """The command line a user runs: `run_pipeline.py run job.yaml`."""
    (tmp_path / f"{out}.schema.yaml").write_text(yaml.safe_dump(schema))
    doc = {"schema": f"{out}.schema.yaml", "source": source, "output": out, **job}
    (tmp_path / f"{out}.job.yaml").write_text(yaml.safe_dump(doc))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(REPO / "run_pipeline.py"), "run",
                           str(tmp_path / f"{out}.job.yaml"), "--runner=FnApiRunner"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def read_back(out: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """filename -> pixels, from make_dataset (tf.data) and from open_records (NumPy)."""
    tf_images: dict[str, np.ndarray] = {}
    for batch in etl.make_dataset(str(out), split="train", batch_size=4):
        names = [n.decode() for n in batch["filename"].numpy()]
        image = batch["image"]
        if len(names) > 1 and image.shape.rank == 4 and image.shape[1] is None:
            assert image.ragged_rank == 2  # RaggedTensor [batch, (height), (width), 3]
        for i, name in enumerate(names):
            row = image[i]
            tf_images[name] = row.to_tensor().numpy() if hasattr(row, "to_tensor") else row.numpy()
    records = etl.open_records(str(out), split="train")
    np_images = {}
    for i in range(len(records)):
        record = records[i]
        np_images[record["filename"].decode()] = record["image"]
    return tf_images, np_images


def stored_blobs(out: Path) -> dict[str, bytes]:
    """filename -> the image bytes as stored in the TFRecord shards."""
    import tensorflow as tf  # noqa: PLC0415

    blobs = {}
    for shard in sorted(out.glob("train-*.tfrecord")):
        for raw in tf.data.TFRecordDataset(str(shard)):
            ex = tf.train.Example.FromString(raw.numpy())
            feats = ex.features.feature
            blobs[feats["filename"].bytes_list.value[0].decode()] = \
                feats["image"].bytes_list.value[0]
    return blobs


# ---- the folder, end to end ------------------------------------------------------------------
def test_skimage_folder_any_size_every_file_accounted_and_pixels_exact(tmp_path: Path) -> None:
    root = photo_folder(tmp_path / "photos")
    source = {"format": "images", "paths": ["photos"]}
    done = run(tmp_path, ANY_SIZE, source, max_bad_fraction=0.2)
    assert done.returncode == 0, done.stderr
    # the two multi-frame files are rejected with their reason, the rest stored
    assert "read 12 records" in done.stdout and "written 10, rejected 2" in done.stdout
    assert "{'unsupported_image': 2}" in done.stdout
    rejected = [json.loads(line) for line in
                (tmp_path / "out/rejected/rejected.jsonl").read_text().splitlines()]
    assert sorted((r["raw"], r["code"], r["reason"]) for r in rejected) == [
        ("animals/tiny.gif", "unsupported_image", "a GIF of 24 frames (animated or multipage); "
         "set the source option 'first_frame: true' to store its first frame"),
        ("things/multipage.tif", "unsupported_image", "a TIFF of 2 frames (animated or "
         "multipage); set the source option 'first_frame: true' to store its first frame")]
    # the files that are not images: one line on the terminal, and in the run's log
    skipped = (f"{root}: skipped 2 file(s) that are not images (not records, not rejected; "
               f"stored are png/jpg/jpeg/gif/bmp/tif/tiff/webp files at <root>/<class>/<file>):"
               f" animals/README.txt, things/.DS_Store")
    assert [line for line in done.stderr.splitlines() if "skipped" in line] == [
        f"WARNING {skipped}"]
    logs = list((tmp_path / ".out.etl/logs").glob("*.log"))
    assert len(logs) == 1 and skipped in logs[0].read_text()

    # first_frame: true stores those two as their first frame
    done = run(tmp_path, ANY_SIZE, {**source, "first_frame": True}, out="all")
    assert done.returncode == 0, done.stderr
    assert "read 12 records" in done.stdout and "written 12, rejected 0" in done.stdout
    tf_images, np_images = read_back(tmp_path / "all")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and p.suffix not in (".txt", ""))
    assert sorted(tf_images) == sorted(np_images) == files and len(files) == 12
    sizes = set()
    for name in files:
        want = pillow_rgb(root / name)  # PNG is lossless: exact for every source format
        sizes.add(want.shape)
        np.testing.assert_array_equal(tf_images[name], want, err_msg=name)
        np.testing.assert_array_equal(np_images[name], want, err_msg=name)
    assert len(sizes) == 11  # all different sizes but camera/astronaut (512x512)
    # PNG files already PNG: stored byte for byte
    blobs = stored_blobs(tmp_path / "all")
    for name in ("space/astronaut.png", "things/camera.png", "animals/chelsea.png"):
        assert blobs[name] == (root / name).read_bytes()
    assert blobs["space/rocket.jpg"][:8] == b"\x89PNG\r\n\x1a\n"  # JPEG -> PNG once


def test_jpeg_feature_keeps_jpeg_files_as_they_are(tmp_path: Path) -> None:
    root = tmp_path / "photos"
    for name in ("space/rocket.jpg", "space/hubble_deep_field.jpg", "things/coffee.png"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / Path(name).name, root / name)
    schema = {**ANY_SIZE, "features": {**ANY_SIZE["features"], "image": {
        "dtype": "uint8", "shape": [None, None, 3], "encoding": "jpeg"}}}
    done = run(tmp_path, schema, {"format": "images", "paths": ["photos"]})
    assert done.returncode == 0, done.stderr
    assert "written 3, rejected 0" in done.stdout
    blobs = stored_blobs(tmp_path / "out")
    for name in ("space/rocket.jpg", "space/hubble_deep_field.jpg"):
        assert blobs[name] == (root / name).read_bytes()  # no re-encode
    assert blobs["things/coffee.png"][:2] == b"\xff\xd8"  # PNG -> JPEG once (quality 95)
    tf_images, np_images = read_back(tmp_path / "out")
    for name, blob in blobs.items():
        want = pillow_rgb(io.BytesIO(blob))  # type: ignore[arg-type]
        assert want.shape == pillow_rgb(root / name).shape
        np.testing.assert_array_equal(np_images[name], want, err_msg=name)
        np.testing.assert_array_equal(tf_images[name], want, err_msg=name)


def test_resize_and_pad_give_one_fixed_shape(tmp_path: Path) -> None:
    root = photo_folder(tmp_path / "photos")
    resized = {**ANY_SIZE, "features": {**ANY_SIZE["features"], "image": {
        "dtype": "uint8", "shape": [None, None, 3], "encoding": "png", "resize": [40, 60]}}}
    done = run(tmp_path, resized, {"format": "images", "paths": ["photos"], "first_frame": True})
    assert done.returncode == 0, done.stderr
    assert "written 12, rejected 0" in done.stdout
    assert yaml.safe_load((tmp_path / "out/schema.yaml").read_text())["features"]["image"] == {
        "dtype": "uint8", "shape": [40, 60, 3], "encoding": "png", "resize": [40, 60]}
    tf_images, np_images = read_back(tmp_path / "out")
    batch = next(iter(etl.make_dataset(str(tmp_path / "out"), split="train", batch_size=5)))
    assert tuple(batch["image"].shape) == (5, 40, 60, 3)  # a dense tensor
    for name in tf_images:
        with Image.open(root / name) as img:
            want = np.asarray(img.convert("RGB").resize((60, 40), Image.Resampling.BILINEAR))
        np.testing.assert_array_equal(tf_images[name], want, err_msg=name)
        np.testing.assert_array_equal(np_images[name], want, err_msg=name)

    padded = {**ANY_SIZE, "features": {**ANY_SIZE["features"], "image": {
        "dtype": "uint8", "shape": [100, 200, 3], "encoding": "png", "pad": [100, 200]}}}
    done = run(tmp_path, padded, {"format": "images", "paths": ["photos"], "first_frame": True},
               out="padded", max_bad_fraction=1.0)
    assert done.returncode == 0, done.stderr
    rejected = sorted(json.loads(line)["raw"] for line in
                      (tmp_path / "padded/rejected/rejected.jsonl").read_text().splitlines())
    small = sorted(n for n in tf_images if pillow_rgb(root / n).shape[0] <= 100
                   and pillow_rgb(root / n).shape[1] <= 200)
    assert small == ["animals/chelsea_crop.bmp", "animals/chelsea_palette.gif",
                     "animals/tiny.gif", "space/astronaut_crop.webp", "things/coffee_crop.tif",
                     "things/multipage.tif"]
    assert rejected == sorted(set(tf_images) - set(small))
    first = json.loads((tmp_path / "padded/rejected/rejected.jsonl").read_text().splitlines()[0])
    assert (first["source"], first["code"], first["reason"]) == (
        str(root / "animals/chelsea.png"), "wrong_shape", "PNG image is 300x451 (height x "
        "width), larger than pad: [100, 200] (padding never crops; use resize: [100, 200] or a "
        "larger pad)")
    _, np_padded = read_back(tmp_path / "padded")
    assert sorted(np_padded) == small
    for name, got in np_padded.items():
        want = pillow_rgb(root / name)
        h, w, _ = want.shape
        np.testing.assert_array_equal(got[:h, :w], want, err_msg=name)
        assert not got[h:].any() and not got[:, w:].any()  # zeros bottom and right


# ---- the rules, one by one -----------------------------------------------------------------
def image_schema(**image: Any) -> Any:
    return schema_from_dict({"features": {"image": {"dtype": "uint8", **image}}})


@pytest.mark.parametrize(("image", "message"), [
    ({"shape": [None, None, 3]}, r"feature 'image': bad shape \[None, None, 3\]: only the first "
                                 r"dimension may be variable \(-1\)$"),
    ({"shape": [None, 5, 3], "encoding": "png"}, r"encoding 'png' needs a fully defined shape, "
                                                 r"got \[-1, 5, 3\]"),
    ({"shape": [5, None, 3], "encoding": "png"}, r"only the first dimension may be variable "
                                                 r"\(-1\); png/jpeg images of any size are "
                                                 r"\[null, null, channels\]"),
    ({"shape": [None, None, 2], "encoding": "png"}, r"channels in \[1, 3, 4\]"),
    ({"shape": [None, None, 3], "resize": [4, 4]}, r"'resize' applies to images stored as png "
                                                   r"or jpeg; add 'encoding: png'"),
    ({"shape": [None, None, 3], "encoding": "png", "resize": [4, 4], "pad": [4, 4]},
     r"give 'resize' or 'pad', not both"),
    ({"shape": [8, 8, 3], "encoding": "png", "pad": [4, 4]},
     r"'pad: \[4, 4\]' and shape \[8, 8, 3\] disagree; write shape \[4, 4, 3\] or "
     r"\[null, null, 3\]"),
    ({"shape": [None, None, 3], "encoding": "jpeg", "resize": [0, 4]},
     r"'resize' must be \[height, width\] in pixels \(positive ints\), got \[0, 4\]"),
])
def test_schema_rules_for_any_size(image: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        image_schema(**image)


def test_schema_any_size_and_sizes_round_trip_to_dict() -> None:
    f = image_schema(shape=[None, None, 1], encoding="png").features[0]
    assert f.variable_image and not f.fixed and f.shape == (-1, -1, 1)
    assert f.to_dict() == {"dtype": "uint8", "shape": [-1, -1, 1], "encoding": "png"}
    g = image_schema(shape=[None, None, 3], encoding="jpeg", pad=[32, 48]).features[0]
    assert g.shape == (32, 48, 3) and g.fixed and g.pad == (32, 48) and not g.variable_image
    assert schema_from_dict({"features": {"image": g.to_dict()}}).features[0] == g
    with pytest.raises(SchemaError, match=r"images of any size \(shape \[null, null, C\]\) are "
                                          r"context features only"):
        schema_from_dict({"kind": "sequence_example", "sequence": {"frames": {
            "dtype": "uint8", "shape": [None, None, 3], "encoding": "png"}}})


def test_decode_true_refuses_any_size(tmp_path: Path) -> None:
    reader = make_reader({"format": "images", "paths": ["photos"], "decode": True},
                         str(tmp_path), "job: sources.train")
    with pytest.raises(ConfigError, match=r"^job: sources.train: 'decode: true' gives pixel "
                                          r"arrays of one size, but schema feature 'image' "
                                          r"takes images of any size \(shape \[-1, -1, 3\]\); "
                                          r"drop 'decode: true' to store the files encoded$"):
        reader.prepare(schema_from_dict(ANY_SIZE), 1 << 26)


def test_pixel_values_for_any_size_are_wrong_type() -> None:
    from etl.contract.columns import to_storage  # noqa: PLC0415

    f = image_schema(shape=[None, None, 3], encoding="png").features[0]
    out = to_storage(f, {"image": np.zeros((2, 4, 4, 3), np.uint8)}, 2)
    assert sorted(out.bad) == [0, 1]
    assert out.bad[0] == ("wrong_type", "shape [-1, -1, 3] (any size) takes encoded png files, "
                                        "not pixel values; give the pixels a fixed shape")


# ---- the folder source, unit by unit ---------------------------------------------------------
def prepared(tmp_path: Path, schema: dict[str, Any], **opts: Any) -> Any:
    reader = make_reader({"format": "images", "paths": ["photos"], **opts}, str(tmp_path),
                         "job: sources.train")
    reader.prepare(schema_from_dict(schema), 1 << 26)
    return reader


def test_every_other_file_is_named_once_per_root(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "photos"
    (root / "cat/deeper").mkdir(parents=True)
    shutil.copy(DATA / "chelsea.png", root / "cat/chelsea.png")
    shutil.copy(DATA / "coffee.png", root / "loose.png")  # not in a class folder
    shutil.copy(DATA / "camera.png", root / "cat/deeper/camera.png")
    for i in range(20):
        (root / f"cat/note{i:02d}.txt").write_text("x")
    reader = prepared(tmp_path, ANY_SIZE)
    with caplog.at_level("WARNING", logger="etl.sources.image_source"):
        blocks = list(reader.read(reader.files()[0]))
    assert [b.num_rows for b in blocks] == [1] and blocks[0].bad == []
    assert [r.getMessage() for r in caplog.records] == [
        f"{root}: skipped 22 file(s) that are not images (not records, not rejected; stored are "
        "png/jpg/jpeg/gif/bmp/tif/tiff/webp files at <root>/<class>/<file>): cat/deeper/camera.png"
        " (not at <root>/<class>/<file>), " + ", ".join(f"cat/note{i:02d}.txt" for i in range(19))
        + " ... and 2 more"]  # cat/note19.txt, loose.png


def test_wide_pixels_are_refused_not_clipped(tmp_path: Path) -> None:
    root = tmp_path / "photos/grey"
    root.mkdir(parents=True)
    wide = (np.arange(12 * 10, dtype=np.uint16).reshape(12, 10) * 500)
    Image.fromarray(wide).save(root / "wide.tif")  # 16-bit grey TIFF
    blocks = list(prepared(tmp_path, ANY_SIZE).read(str(tmp_path / "photos")))
    assert [(b.code, b.reason) for b in blocks[0].bad] == [(
        "unsupported_image", "a TIFF image of I;16 pixels (16-bit, 32-bit or float): storing it "
        "as uint8 x 3 channel(s) would change its values; convert it to 8-bit first")]
    grey16 = {**ANY_SIZE, "features": {**ANY_SIZE["features"], "image": {
        "dtype": "uint16", "shape": [None, None, 1], "encoding": "png"}}}
    blocks = list(prepared(tmp_path, grey16).read(str(tmp_path / "photos")))
    assert blocks[0].bad == []
    with Image.open(io.BytesIO(blocks[0].columns["image"][0].as_py())) as img:
        assert img.format == "PNG"
        np.testing.assert_array_equal(np.asarray(img), wide)  # 16-bit kept exactly


def test_fixed_shape_stores_other_formats_of_its_size_as_png(tmp_path: Path) -> None:
    root = tmp_path / "photos/cat"
    root.mkdir(parents=True)
    chelsea = Image.open(DATA / "chelsea.png").convert("RGB").crop((0, 0, 40, 30))
    chelsea.save(root / "a.jpg", quality=90)
    chelsea.quantize(32).save(root / "b.gif")
    chelsea.save(root / "c.bmp")
    chelsea.crop((0, 0, 40, 29)).save(root / "d.bmp")  # one row short
    fixed = {**ANY_SIZE, "features": {**ANY_SIZE["features"], "image": {
        "dtype": "uint8", "shape": [30, 40, 3], "encoding": "png"}}}
    blocks = list(prepared(tmp_path, fixed, verify=False).read(str(tmp_path / "photos")))
    assert [(b.raw, b.code, b.reason) for b in blocks[0].bad] == [(
        "cat/d.bmp", "wrong_shape", "image is 40x29 (width x height), expected 40x30: schema "
        "feature 'image' has shape [30, 40, 3]")]
    stored = blocks[0].columns["image"].to_pylist()
    assert blocks[0].columns["filename"].to_pylist() == ["cat/a.jpg", "cat/b.gif", "cat/c.bmp"]
    for name, blob in zip(["a.jpg", "b.gif", "c.bmp"], stored, strict=True):
        assert blob[:8] == b"\x89PNG\r\n\x1a\n"
        np.testing.assert_array_equal(pillow_rgb(io.BytesIO(blob)),  # type: ignore[arg-type]
                                      pillow_rgb(root / name), err_msg=name)
