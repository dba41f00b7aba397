"""Clear words: `inspect` shows vocabulary labels beside ids and UTF-8 text as text (other
bytes escaped), and says "not a TFRecord file" for a CSV; `spec` and `etl.make_dataset` print
no TensorFlow start-up lines; an `array_record` run's summary names the reader that reads it;
`run --estimate` whose sampled records already break the bad-record limit says so and exits as
the real run would (3)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import palmerpenguins
import pytest

from etl.formats.tfrecord import frame_all
from etl.tools.inspect_output import inspect
from tests.helpers import IDS_SCHEMA, ROOT, cli

PENGUINS_RAW = os.path.join(os.path.dirname(palmerpenguins.__file__), "data", "penguins-raw.csv")
START_UP = re.compile(r"absl::InitializeLog|^[IWE]0000 |oneDNN custom operations|cuInit|"
                      r"cuda drivers|buffer size", re.M)

SCHEMA = textwrap.dedent("""\
    name: birds
    features:
      species: {dtype: int64, shape: [], vocabulary: [Adelie, Chinstrap, Gentoo]}
      tags: {dtype: int64, shape: [2], vocabulary: [a, b], oov_id: 2}
      name: {dtype: string, shape: []}
      blob: {dtype: bytes, shape: []}
    """)


def example(species: int, tags: list[int], name: bytes, blob: bytes) -> bytes:
    from tensorflow.core.example import example_pb2  # protobuf only, no TensorFlow runtime

    ex = example_pb2.Example()
    ex.features.feature["species"].int64_list.value.append(species)
    ex.features.feature["tags"].int64_list.value.extend(tags)
    ex.features.feature["name"].bytes_list.value.append(name)
    ex.features.feature["blob"].bytes_list.value.append(blob)
    return ex.SerializeToString()


def test_inspect_shows_labels_beside_ids_and_utf8_text_as_text(tmp_path: Path) -> None:
    schema = tmp_path / "birds.yaml"
    schema.write_text(SCHEMA)
    shard = tmp_path / "train-00000-of-00001.tfrecord"
    shard.write_bytes(frame_all([
        example(2, [0, 2], "Adélie Penguin (Pygoscelis adeliae)".encode(), b"\xff\xfe\x00ok"),
        example(0, [1, 1], ("x" * 60).encode(), "ü".encode() * 60)]))
    blocks = list(inspect(str(shard), schema=str(schema)))
    assert blocks[2].splitlines()[1:] == [
        "  species: int64 [] = 2 (Gentoo)",
        "  tags: int64 [2] = [0 (a), 2 (out of vocabulary)]",
        "  name: bytes [] = 'Adélie Penguin (Pygoscelis adeliae)'",
        "  blob: bytes [] = b'\\xff\\xfe\\x00ok'"]
    assert blocks[3].splitlines()[1:] == [
        "  species: int64 [] = 0 (Adelie)",
        "  tags: int64 [2] = [1 (b), 1 (b)]",
        "  name: bytes [] = '" + "x" * 48 + "...(60 bytes)'",
        "  blob: bytes [] = '" + "ü" * 48 + "...(120 bytes)'"]
    raw = list(inspect(str(shard)))  # no schema: the proto's UTF-8 text as text too
    assert 'value: "Adélie Penguin (Pygoscelis adeliae)"' in raw[2]
    assert 'value: "\\377\\376\\000ok"' in raw[2]


@pytest.mark.slow
def test_inspect_on_a_csv_says_not_a_tfrecord_file(tmp_path: Path) -> None:
    done = cli("inspect", PENGUINS_RAW)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr == (f"error: {PENGUINS_RAW}: not a TFRecord file (it does not start with "
                           "a TFRecord record header); inspect reads TFRecord files, such as an "
                           "output's *.tfrecord shards\n")
    # a shard of ours damaged at its start is still damage (exit 3), not "not a TFRecord"
    shard = tmp_path / "train-00000-of-00001.tfrecord"
    shard.write_bytes(b"\x00" * 8 + frame_all([b"abc"])[8:])
    damaged = cli("inspect", str(shard))
    assert damaged.returncode == 3, damaged.stderr
    assert "corrupted record header" in damaged.stderr


@pytest.mark.slow
def test_spec_prints_no_tensorflow_start_up_lines(tmp_path: Path) -> None:
    schema = tmp_path / "birds.yaml"
    schema.write_text(SCHEMA)
    done = cli("spec", str(schema))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith("# schema 'birds', kind example")
    verbose = cli("spec", str(schema), "--verbose")
    assert verbose.returncode == 0 and START_UP.search(verbose.stderr), verbose.stderr


def _read_back(out: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = ("import os, etl\n"
            f"ds = etl.make_dataset({out!r}, split='train', batch_size=4, shuffle_buffer=0)\n"
            "print(sum(int(b['id'].shape[0]) for b in ds))\n"
            "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=180)


@pytest.mark.slow
def test_make_dataset_prints_no_tensorflow_start_up_lines(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(IDS_SCHEMA)
    (tmp_path / "d.csv").write_text("id,a,b\n" + "".join(f"{i},{i},{i}\n" for i in range(9)))
    (tmp_path / "job.yaml").write_text("schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\n"
                                       "output: out\n")
    assert cli("run", str(tmp_path / "job.yaml")).returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = ROOT
    quiet = _read_back(str(tmp_path / "out"), env)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert quiet.stdout == "9\n2\n"  # the level TensorFlow read at import, documented
    loud = _read_back(str(tmp_path / "out"), {**env, "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert loud.returncode == 0 and loud.stdout == "9\n0\n"
    assert START_UP.search(loud.stderr), loud.stderr  # the user's own setting wins


@pytest.mark.slow
def test_array_record_summary_names_its_reader(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(IDS_SCHEMA)
    (tmp_path / "d.csv").write_text("id,a,b\n" + "".join(f"{i},{i},{i}\n" for i in range(9)))
    (tmp_path / "job.yaml").write_text("schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\n"
                                       "output: out\nformat: array_record\n")
    done = cli("run", str(tmp_path / "job.yaml"))
    assert done.returncode == 0, done.stderr
    out = str(tmp_path / "out")
    assert done.stdout.splitlines()[-1] == (
        f"Read it back: etl.open_records({out!r}, split='train') (random access; a Grain "
        "RandomAccessDataSource)")
    assert "make_dataset" not in done.stdout


@pytest.mark.slow
def test_estimate_says_when_the_sample_would_fail_the_run(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(IDS_SCHEMA)
    rows = [f"{i},{i},{i}" if i % 3 else f"{i},x{i},{i}" for i in range(23)]
    (tmp_path / "d.csv").write_text("id,a,b\n" + "\n".join(rows) + "\n")
    (tmp_path / "job.yaml").write_text("schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\n"
                                       "output: out\nmax_bad_fraction: 0.25\n")
    done = cli("run", str(tmp_path / "job.yaml"), "--estimate")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines()[-1] == (
        "  would fail        8 of 23 sampled records rejected (34.78% > max_bad_fraction "
        "25.00%): unparsable_number 8; the real run would exit 3 and publish nothing. First: "
        f"{tmp_path}/d.csv:2: feature 'x': column 'a': cannot parse 'x0' as float32 [unparsable_number]")
    real = cli("run", str(tmp_path / "job.yaml"))
    assert real.returncode == 3, real.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "job.yaml").write_text("schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\n"
                                       "output: out\nmax_bad_fraction: 0.4\n")
    allowed = cli("run", str(tmp_path / "job.yaml"), "--estimate")
    assert allowed.returncode == 0, allowed.stderr
    assert "would fail" not in allowed.stdout
    assert ", 8 rejected of 23" in allowed.stdout
