"""Bad binary inputs (TFRecord, images, IDX, npy, Parquet): exact rejected records, counts,
positions and messages at reader level.

Every record read is either in a block or counted by exactly one BadRecord (`num_read`), a bad
record never takes its neighbours down, and indexes after a bad record stay where they were.
"""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from etl.base.errors import BadInputError, BadRecord
from etl.contract.codec import Encoder
from etl.contract.record_check import RecordChecker, top_level_fields
from etl.contract.schema import load_schema, schema_from_dict
from etl.formats.proto_wire import binary_column
from etl.formats.tfrecord import frame_all
from etl.sources import make_reader
from etl.sources.base import Block
from tests.helpers import ROOT, column

WHERE = "jobs/t.yaml: sources.train"
EXAMPLE = schema_from_dict({"name": "ex", "features": {
    "id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": [2]}}})
SEQUENCE = schema_from_dict({"name": "seq", "kind": "sequence_example",
                             "context": {"id": {"dtype": "int64", "shape": []}},
                             "sequence": {"tokens": {"dtype": "int64", "shape": []}}})


def examples(n: int, schema: Any = EXAMPLE) -> list[bytes]:
    if schema.kind == "example":
        columns = {"id": np.arange(n), "x": np.arange(2 * n, dtype=np.float32).reshape(n, 2)}
    else:
        columns = {"id": np.arange(n), "tokens": [list(range(1 + i % 4)) for i in range(n)]}
    return Encoder(schema).encode(columns).records


def frame_offsets(records: list[bytes]) -> list[int]:
    out = [0]
    for r in records:
        out.append(out[-1] + 16 + len(r))
    return out


def read_all(tmp_path: Path, config: dict[str, Any], schema: Any = None,
             max_record_bytes: int = 64 << 20) -> tuple[list[Block], Any]:
    reader = make_reader(config, str(tmp_path), WHERE)
    if schema is not None:
        reader.prepare(schema, max_record_bytes)
    return [b for f in reader.files() for b in reader.read(f)], reader


def good(blocks: list[Block], name: str = "__serialized__") -> list[Any]:
    return column(blocks, name)


def positions(blocks: list[Block]) -> list[int]:
    return [int(p) for b in blocks for p in b.positions]


def rejected(blocks: list[Block]) -> list[BadRecord]:
    return [r for b in blocks for r in b.bad]


def num_read(blocks: list[Block]) -> int:
    return sum(b.num_read for b in blocks)


# ---- TFRecord framing ---------------------------------------------------------------------------
RECORDS = examples(1000)
OFFSETS = frame_offsets(RECORDS)
TFR = {"format": "tfrecord", "paths": "t.tfrecord", "block_rows": 256}


def write_frames(tmp_path: Path, data: bytes | bytearray, name: str = "t.tfrecord") -> None:
    (tmp_path / name).write_bytes(bytes(data))


def test_flipped_data_byte_costs_one_record(tmp_path: Path) -> None:
    data = bytearray(frame_all(RECORDS))
    data[OFFSETS[400] + 12 + 5] ^= 0x10  # inside record 400's data
    write_frames(tmp_path, data)
    blocks, _ = read_all(tmp_path, TFR, EXAMPLE)
    assert good(blocks) == RECORDS[:400] + RECORDS[401:]
    assert positions(blocks) == [i for i in range(1000) if i != 400]
    assert rejected(blocks) == [BadRecord(
        str(tmp_path / "t.tfrecord"), "corrupt_record",
        f"data CRC mismatch in a record of {len(RECORDS[400])} bytes (its length header is "
        f"valid: reading goes on with the next record)", record=400, byte=OFFSETS[400])]
    assert num_read(blocks) == 1000
    assert np.concatenate([b.offsets for b in blocks]).tolist() == [
        o for i, o in enumerate(OFFSETS[:-1]) if i != 400]


@pytest.mark.parametrize("at", [2, 9])  # in the length, in the length's CRC
def test_flipped_length_header_byte_resynchronises(tmp_path: Path, at: int) -> None:
    data = bytearray(frame_all(RECORDS))
    data[OFFSETS[400] + at] ^= 0x04
    write_frames(tmp_path, data)
    blocks, _ = read_all(tmp_path, TFR, EXAMPLE)
    assert good(blocks) == RECORDS[:400] + RECORDS[401:]
    assert positions(blocks) == [i for i in range(1000) if i != 400]
    [bad] = rejected(blocks)
    assert (bad.code, bad.record, bad.byte) == ("corrupt_record", 400, OFFSETS[400])
    assert bad.reason == (f"length header CRC mismatch: bytes {OFFSETS[400]}-{OFFSETS[401] - 1} "
                          f"skipped (reading resumes at byte {OFFSETS[401]})")
    assert bad.message().startswith(f"{tmp_path}/t.tfrecord: record 400, byte {OFFSETS[400]}: ")
    assert num_read(blocks) == 1000


def test_truncated_tail_is_one_corrupt_record(tmp_path: Path) -> None:
    write_frames(tmp_path, frame_all(RECORDS)[:-7])
    blocks, _ = read_all(tmp_path, TFR, EXAMPLE)
    assert good(blocks) == RECORDS[:999]
    assert rejected(blocks) == [BadRecord(
        str(tmp_path / "t.tfrecord"), "corrupt_record",
        f"the file ends inside a record: its header says {len(RECORDS[999])} data bytes + 4 CRC "
        f"bytes, {len(RECORDS[999]) - 3} of them follow", record=999, byte=OFFSETS[999])]
    assert num_read(blocks) == 1000


def test_oversized_length_header_is_skipped_unread(tmp_path: Path) -> None:
    big = b"\x0a\x00" + bytes(3000)  # an Example with unknown padding would do; never parsed
    records = RECORDS[:3] + [big] + RECORDS[3:6]
    write_frames(tmp_path, frame_all(records))
    blocks, _ = read_all(tmp_path, TFR, EXAMPLE, max_record_bytes=1024)
    assert good(blocks) == RECORDS[:6] and positions(blocks) == [0, 1, 2, 4, 5, 6]
    assert rejected(blocks) == [BadRecord(
        str(tmp_path / "t.tfrecord"), "oversized_record",
        "record of 3002 bytes is over max_record_bytes (1024); skipped unread", record=3,
        byte=frame_offsets(records)[3])]


def test_broken_gzip_stream_fails_naming_file_and_offset(tmp_path: Path) -> None:
    compressed = gzip.compress(frame_all(RECORDS), mtime=0)
    write_frames(tmp_path, compressed[: len(compressed) // 2], "t.tfrecord.gz")
    reader = make_reader({"format": "tfrecord", "paths": "t.tfrecord.gz"}, str(tmp_path), WHERE)
    with pytest.raises(BadInputError, match=r"t\.tfrecord\.gz: cannot read gzip TFRecord data "
                                            r"past uncompressed byte \d+: the compressed stream "
                                            r"ends early \(truncated file\); the records after "
                                            r"it are lost"):
        list(reader.read(reader.files()[0]))


# ---- TFRecord records against the schema --------------------------------------------------------
def test_sequence_examples_under_an_example_schema(tmp_path: Path) -> None:
    write_frames(tmp_path, frame_all(examples(50, SEQUENCE)))
    blocks, _ = read_all(tmp_path, TFR, EXAMPLE)
    assert good(blocks) == [] and num_read(blocks) == 50
    bad = rejected(blocks)
    assert [(b.code, b.record) for b in bad] == [("schema_mismatch", i) for i in range(50)]
    assert bad[0].reason == "a SequenceExample (it has feature_lists); the schema is kind example"


def test_mixed_file_exact_counts(tmp_path: Path) -> None:
    seq = examples(10, SEQUENCE)
    wrong_list = Encoder(schema_from_dict({"features": {
        "id": {"dtype": "float32", "shape": []}, "x": {"dtype": "float32", "shape": [2]}}})
    ).encode({"id": [1.5], "x": [[1, 2]]}).records[0]
    short = Encoder(schema_from_dict({"features": {
        "id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": [3]}}})
    ).encode({"id": [7], "x": [[1, 2, 3]]}).records[0]
    no_x = Encoder(schema_from_dict({"features": {"id": {"dtype": "int64", "shape": []}}})
                   ).encode({"id": [8]}).records[0]
    records = list(RECORDS[:100])
    records[10], records[20], records[30], records[40] = seq[0], wrong_list, short, no_x
    records[50] = b"\x08\x01"  # field 1 as a varint: not an Example
    write_frames(tmp_path, frame_all(records))
    blocks, _ = read_all(tmp_path, TFR, EXAMPLE)
    assert positions(blocks) == [i for i in range(100) if i not in (10, 20, 30, 40, 50)]
    assert num_read(blocks) == 100
    got = [(b.record, b.code, b.feature, b.reason) for b in rejected(blocks)]
    assert got == [
        (10, "schema_mismatch", "", "a SequenceExample (it has feature_lists); the schema is "
                                    "kind example"),
        (20, "schema_mismatch", "id", "has a float_list; the schema stores it as int64_list"),
        (30, "wrong_shape", "x", "3 values; shape [2] needs 2"),
        (40, "missing_required", "x", "required feature is missing"),
        (50, "schema_mismatch", "", "top-level field 1 (wire type 0): not a "
                                    "tf.train.Example/SequenceExample"),
    ]
    assert all(b.byte == frame_offsets(records)[b.record] for b in rejected(blocks))


def test_examples_under_a_sequence_schema_and_bad_steps(tmp_path: Path) -> None:
    seq = examples(20, SEQUENCE)
    wide = schema_from_dict({"name": "w", "kind": "sequence_example",
                             "context": {"id": {"dtype": "int64", "shape": []}},
                             "sequence": {"tokens": {"dtype": "int64", "shape": [2]}}})
    two_per_step = Encoder(wide).encode({"id": [1], "tokens": [[[1, 2], [3, 4]]]}).records[0]
    records = seq[:5] + [RECORDS[0], two_per_step] + seq[5:]
    write_frames(tmp_path, frame_all(records))
    blocks, _ = read_all(tmp_path, TFR, SEQUENCE)
    assert good(blocks) == seq
    got = [(b.record, b.code, b.feature, b.reason) for b in rejected(blocks)]
    assert got == [
        (5, "schema_mismatch", "", "no feature_lists (an Example, not a SequenceExample); the "
                                   "schema is kind sequence_example"),
        (6, "wrong_shape", "tokens", "step 0: 2 values; shape [] needs 1"),
    ]


def test_raw_encoded_feature_byte_length(tmp_path: Path) -> None:
    mnist = load_schema("schemas/mnist.yaml")
    enc = Encoder(mnist)
    ok = enc.encode({"image": np.zeros((3, 28, 28, 1), np.uint8), "label": [1, 2, 3]}).records
    small = Encoder(schema_from_dict({"features": {
        "image": {"dtype": "uint8", "shape": [27, 28, 1], "encoding": "raw"},
        "label": {"dtype": "int64", "shape": []}}})).encode(
        {"image": np.zeros((1, 27, 28, 1), np.uint8), "label": [4]}).records
    checker = RecordChecker(mnist)
    keep, bad = checker.check(binary_column(ok + small), "m.tfrecord", np.arange(4))
    assert keep.tolist() == [True, True, True, False]
    assert [(b.record, b.code, b.feature, b.reason) for b in bad] == [
        (3, "wrong_shape", "image", "raw value of 756 bytes; shape [28, 28, 1] of uint8 needs 784")]


def test_own_encoder_output_always_passes() -> None:
    for schema in (EXAMPLE, SEQUENCE, load_schema("schemas/sentences.yaml")):
        n = 300
        if schema is EXAMPLE or schema is SEQUENCE:
            records = examples(n, schema)
        else:
            records = Encoder(schema).encode({
                "id": np.arange(n), "length": np.arange(n) % 5,
                "tokens": [list(range(i % 5)) for i in range(n)]}).records
        keep, bad = RecordChecker(schema).check(binary_column(records), "s", np.arange(n))
        assert keep.all() and bad == []


def test_top_level_walk_counts_fields() -> None:
    counts, bad = top_level_fields(binary_column([RECORDS[0], examples(1, SEQUENCE)[0], b"",
                                                  b"\x0a\x05ab"]))
    assert counts[:, 1:].tolist() == [[1, 0], [1, 1], [0, 0], [0, 0]]
    assert bad == {3: "top-level field 1 runs past the end of the record: not a valid "
                      "serialized proto"}


# ---- image folders --------------------------------------------------------------------------------
def png(height: int, width: int, seed: int = 0) -> bytes:
    buf = io.BytesIO()
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


IMAGES = schema_from_dict({"features": {
    "image": {"dtype": "uint8", "shape": [16, 16, 3], "encoding": "png"},
    "label": {"dtype": "int64", "shape": [], "vocabulary": ["cat", "dog"]}}})


def image_root(tmp_path: Path) -> Path:
    for i in range(6):
        path = tmp_path / "root" / ("cat" if i < 3 else "dog") / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png(16, 16, i))
    return tmp_path / "root"


def test_wrong_size_png_is_one_wrong_shape_naming_the_file(tmp_path: Path) -> None:
    root = image_root(tmp_path)
    (root / "dog/4.png").write_bytes(png(32, 32))
    blocks, _ = read_all(tmp_path, {"format": "images", "paths": ["root"]}, IMAGES)
    assert good(blocks, "filename") == ["cat/0.png", "cat/1.png", "cat/2.png", "dog/3.png",
                                        "dog/5.png"]
    assert positions(blocks) == [0, 1, 2, 3, 5]
    assert rejected(blocks) == [BadRecord(
        str(root / "dog/4.png"), "wrong_shape", "image is 32x32 (width x height), expected 16x16: "
        "schema feature 'image' has shape [16, 16, 3]", record=4, feature="image", raw="dog/4.png")]
    # decoded pixels: the same check, and the channel count is a configuration error
    blocks, _ = read_all(tmp_path, {"format": "images", "paths": ["root"], "decode": True},
                         schema_from_dict({"features": {
                             "image": {"dtype": "uint8", "shape": [16, 16, 3], "encoding": "raw"}}}))
    assert good(blocks[:1], "filename") == ["cat/0.png", "cat/1.png", "cat/2.png", "dog/3.png",
                                            "dog/5.png"]
    assert [b.record for b in rejected(blocks)] == [4]


def test_truncated_png_is_bad_image(tmp_path: Path) -> None:
    root = image_root(tmp_path)
    whole = png(16, 16, 9)
    (root / "cat/1.png").write_bytes(whole[: len(whole) // 2])
    blocks, _ = read_all(tmp_path, {"format": "images", "paths": ["root"]}, IMAGES)
    assert positions(blocks) == [0, 2, 3, 4, 5]
    assert rejected(blocks) == [BadRecord(
        str(root / "cat/1.png"), "bad_image", "cannot read image: OSError: image file is truncated",
        record=1, feature="image", raw="cat/1.png")]


# ---- IDX ------------------------------------------------------------------------------------------
def idx_pair(tmp_path: Path, n: int = 10, gz: bool = True) -> dict[str, Any]:
    from etl.formats.idx import write_idx  # noqa: PLC0415

    suffix = ".gz" if gz else ""
    write_idx(str(tmp_path / f"images{suffix}"), np.arange(n * 4, dtype=np.uint8).reshape(n, 2, 2))
    write_idx(str(tmp_path / f"labels{suffix}"), np.arange(n, dtype=np.uint8))
    return {"format": "idx", "paths": {"image": f"images{suffix}", "label": f"labels{suffix}"},
            "block_rows": 4}


def test_idx_bad_magic_fails_at_plan_time(tmp_path: Path) -> None:
    config = idx_pair(tmp_path)
    (tmp_path / "labels.gz").write_bytes(gzip.compress(b"\x00\x00\x07\x01" + bytes(14), mtime=0))
    with pytest.raises(BadInputError) as info:
        make_reader(config, str(tmp_path), WHERE).files()
    assert str(info.value) == (f"{tmp_path}/labels.gz: not an IDX file (magic bytes 00 00 07 01 at "
                               f"byte 0; expected 00 00 <dtype code, one of 08, 09, 0b, 0c, 0d, "
                               f"0e> <ndims >= 1>)")


def test_idx_truncated_counts_the_missing_records(tmp_path: Path) -> None:
    config = idx_pair(tmp_path, gz=False)
    data = (tmp_path / "images").read_bytes()
    (tmp_path / "images").write_bytes(data[:-6])  # record 8 cut, record 9 gone
    blocks, _ = read_all(tmp_path, config)
    assert positions(blocks) == list(range(8)) and good(blocks, "label") == list(range(8))
    assert rejected(blocks) == [BadRecord(
        str(tmp_path / "images"), "unreadable_rest",
        "the data ends early (truncated file) at byte 48: records 8 to 9 of the 10 its header "
        "promises are missing", record=8, byte=48, count=2)]
    assert num_read(blocks) == 10
    # gzipped: the same, found while streaming
    config = idx_pair(tmp_path)
    whole = gzip.decompress((tmp_path / "images.gz").read_bytes())
    (tmp_path / "images.gz").write_bytes(gzip.compress(whole[:-6], mtime=0))
    blocks, _ = read_all(tmp_path, config)
    assert positions(blocks) == list(range(8)) and num_read(blocks) == 10
    assert [(b.record, b.byte, b.count) for b in rejected(blocks)] == [(8, 48, 2)]


def test_idx_longer_than_dims_and_count_mismatch(tmp_path: Path) -> None:
    config = idx_pair(tmp_path, gz=False)
    (tmp_path / "images").write_bytes((tmp_path / "images").read_bytes() + b"\x00" * 4)
    with pytest.raises(BadInputError, match=r"images: IDX dims \[10, 2, 2\] of u1 describe 56 "
                                            r"bytes, the file has 60: the dims do not match"):
        make_reader(config, str(tmp_path), WHERE).files()
    config = idx_pair(tmp_path)
    from etl.formats.idx import write_idx  # noqa: PLC0415

    write_idx(str(tmp_path / "labels.gz"), np.zeros(9, np.uint8))
    with pytest.raises(BadInputError, match=r"different numbers of records .*images\.gz has 10, "
                                            r".*labels\.gz has 9"):
        make_reader(config, str(tmp_path), WHERE).files()


# ---- npy / npz -------------------------------------------------------------------------------------
def test_npy_bad_header_and_truncated_data(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.arange(20, dtype=np.int32).reshape(10, 2))
    np.save(tmp_path / "y.npy", np.arange(10))
    config = {"format": "npy", "paths": {"x": "x.npy", "y": "y.npy"}, "block_rows": 4}
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "x.npy").write_bytes(data[:-12])  # row 8 cut (4 of 8 bytes left), row 9 gone
    blocks, _ = read_all(tmp_path, config)
    assert positions(blocks) == list(range(8)) and num_read(blocks) == 10
    header = len(data) - 80
    assert rejected(blocks) == [BadRecord(
        str(tmp_path / "x.npy"), "unreadable_rest",
        f"the data ends early (truncated file) at byte {header + 64}: rows 8 to 9 of the 10 its "
        f"header promises are missing", record=8, byte=header + 64, count=2)]
    (tmp_path / "x.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(BadInputError, match=r"x\.npy: not a \.npy array \(bad header"):
        make_reader(config, str(tmp_path), WHERE).files()


@pytest.mark.slow
def test_npy_truncated_while_it_is_read_is_counted_not_a_crash(tmp_path: Path) -> None:
    """An input cut short between two blocks of a running read: the rows after the cut are one
    counted unreadable_rest, the reading process lives (a memory map would die of SIGBUS)."""
    np.save(tmp_path / "x.npy", np.arange(40_000, dtype=np.int64).reshape(10_000, 4))
    header = (tmp_path / "x.npy").stat().st_size - 320_000
    code = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from etl.sources import make_reader
reader = make_reader({{"format": "npy", "paths": {{"x": "x.npy"}}, "block_rows": 4096}},
                     {str(tmp_path)!r}, "job.yaml: source")
blocks = reader.read(reader.files()[0])
first = next(blocks)
os.truncate({str(tmp_path / "x.npy")!r}, {header} + 5000 * 32)
rest = list(blocks)
bad = [r for b in [first, *rest] for r in b.bad]
print(sum(len(b.positions) for b in [first, *rest]), int(rest[0].columns["x"][-1][3]))
print(bad[0].code, bad[0].record, bad[0].count, bad[0].reason)
"""
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [
        "5000 19999",
        f"unreadable_rest 5000 5000 the file was truncated while it was read at byte "
        f"{header + 5000 * 32}: rows 5000 to 9999 of the 10000 its header promises are missing"]


def test_truncated_npz_fails_at_plan_time(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", a=np.arange(10))
    data = (tmp_path / "d.npz").read_bytes()
    (tmp_path / "d.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInputError, match=r"d\.npz: not a readable npz archive"):
        make_reader({"format": "npz", "paths": ["d.npz"]}, str(tmp_path), WHERE).files()


# ---- Parquet ---------------------------------------------------------------------------------------
def test_parquet_broken_footer_fails_at_plan_time(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": list(range(5))}), tmp_path / "t.parquet")
    data = (tmp_path / "t.parquet").read_bytes()
    (tmp_path / "t.parquet").write_bytes(data[:-6])
    with pytest.raises(BadInputError, match=r"t\.parquet: not a readable Parquet file \(its footer"):
        make_reader({"format": "parquet", "paths": "t.parquet"}, str(tmp_path), WHERE).files()


def test_parquet_corrupt_row_group_is_counted(tmp_path: Path) -> None:
    table = pa.table({"id": np.arange(300, dtype=np.int64)})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=100, compression="snappy")
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata
    column = meta.row_group(1).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    data = bytearray((tmp_path / "t.parquet").read_bytes())
    data[start + 20 : start + column.total_compressed_size] = b"\xff" * (
        column.total_compressed_size - 20)
    (tmp_path / "t.parquet").write_bytes(bytes(data))
    blocks, _ = read_all(tmp_path, {"format": "parquet", "paths": "t.parquet"})
    assert positions(blocks) == list(range(100)) + list(range(200, 300))
    [bad] = rejected(blocks)
    assert (bad.code, bad.record, bad.count, bad.byte) == ("unreadable_rest", 100, 100, start)
    assert bad.reason.startswith("row group 1 cannot be decoded (")
    assert bad.reason.endswith("its rows 100 to 199 are lost")
    assert num_read(blocks) == 300
