"""The conversions users write by hand today, each runnable as its own process.

    python -m benchmarks.baselines beam_naive --input data.csv --output OUT
    python -m benchmarks.baselines tf_loop --input images-idx3-ubyte.gz \
        --labels labels-idx1-ubyte.gz --output OUT

- `beam_naive`: ReadFromText(csv, skip_header_lines=1) -> Map(parse line into a
  tf.train.Example, serialize) -> Reshuffle() -> WriteToTFRecord(num_shards=16), on the local
  FnApiRunner (never plain DirectRunner: Beam 2.77 tries to download Prism first). For IDX:
  a DoFn reads the two IDX arrays and yields one Example per image.
- `tf_loop`: one Python process: csv module (or NumPy for IDX) + tf.train.Example, every
  serialized record held in memory and shuffled with random.Random(42), then written to 16
  shards with tf.io.TFRecordWriter.

The Examples match schemas/bench_csv.yaml (one feature per column: `f0`..`f7` float, `i0`,
`i1` int64, `cat` bytes; ~182 bytes serialized, as in the issue) and
schemas/bench_images.yaml (`image` raw bytes of the 28x28x1 uint8 array, `label` int64).
Extra arguments after the known ones go to Beam's PipelineOptions (beam_naive only).
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import time

SHARDS = 16
FLOAT_NAMES = tuple(f"f{i}" for i in range(8))
VARIANTS = ("beam_naive", "tf_loop")


def _shard_name(output: str, index: int, shards: int = SHARDS) -> str:
    return os.path.join(output, f"train-{index:05d}-of-{shards:05d}.tfrecord")


# ---- Example builders (shared by both baselines) -----------------------------------------
_TRAIN = None


def _train():
    """tf.train, imported on first use (where the work happens, e.g. in a Beam worker)."""
    global _TRAIN
    if _TRAIN is None:
        import tensorflow as tf  # noqa: PLC0415

        _TRAIN = tf.train
    return _TRAIN


def csv_example(fields: list[str]) -> bytes:
    """A serialized tf.train.Example from one parsed CSV row (f0..f7, i0, i1, cat)."""
    train = _TRAIN or _train()
    feature = {name: train.Feature(float_list=train.FloatList(value=[float(value)]))
               for name, value in zip(FLOAT_NAMES, fields[:8], strict=True)}
    feature["i0"] = train.Feature(int64_list=train.Int64List(value=[int(fields[8])]))
    feature["i1"] = train.Feature(int64_list=train.Int64List(value=[int(fields[9])]))
    feature["cat"] = train.Feature(bytes_list=train.BytesList(value=[fields[10].encode()]))
    return train.Example(features=train.Features(feature=feature)).SerializeToString()


def image_example(image: bytes, label: int) -> bytes:
    train = _TRAIN or _train()
    return train.Example(features=train.Features(feature={
        "image": train.Feature(bytes_list=train.BytesList(value=[image])),
        "label": train.Feature(int64_list=train.Int64List(value=[int(label)])),
    })).SerializeToString()


def _read_idx(path: str):
    from benchmarks.data import read_idx  # noqa: PLC0415

    return read_idx(path)


# ---- beam_naive --------------------------------------------------------------------------
def run_beam_naive(dataset: str, inp: str, labels: str | None, output: str,
                   beam_args: list[str]) -> None:
    import apache_beam as beam  # noqa: PLC0415
    from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415

    if not any(a.startswith("--runner") for a in beam_args):
        beam_args = ["--runner=FnApiRunner", *beam_args]
    prefix = os.path.join(output, "train")

    def parse_line(line: str) -> bytes:
        return csv_example(line.split(","))

    class ReadIdx(beam.DoFn):
        def process(self, paths):
            images = _read_idx(paths[0])
            label_values = _read_idx(paths[1])
            for i in range(len(images)):
                yield image_example(images[i].tobytes(), int(label_values[i]))

    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        if dataset == "csv":
            examples = (p
                        | "Read" >> beam.io.ReadFromText(inp, skip_header_lines=1)
                        | "ToExample" >> beam.Map(parse_line))
        else:
            examples = (p
                        | "Paths" >> beam.Create([(inp, labels)])
                        | "ReadIdx" >> beam.ParDo(ReadIdx()))
        _ = (examples
             | "Reshuffle" >> beam.Reshuffle()
             | "Write" >> beam.io.WriteToTFRecord(prefix, file_name_suffix=".tfrecord",
                                                 num_shards=SHARDS))


# ---- tf_loop -----------------------------------------------------------------------------
def run_tf_loop(dataset: str, inp: str, labels: str | None, output: str) -> None:
    import tensorflow as tf  # noqa: PLC0415

    records: list[bytes] = []
    if dataset == "csv":
        with open(inp, newline="", encoding="ascii") as fh:
            reader = csv.reader(fh)
            next(reader)  # header
            records = [csv_example(row) for row in reader]
    else:
        images = _read_idx(inp)
        label_values = _read_idx(labels)
        records = [image_example(images[i].tobytes(), int(label_values[i]))
                   for i in range(len(images))]
    random.Random(42).shuffle(records)
    n = len(records)
    for shard in range(SHARDS):
        with tf.io.TFRecordWriter(_shard_name(output, shard)) as writer:
            for record in records[shard * n // SHARDS : (shard + 1) * n // SHARDS]:
                writer.write(record)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Hand-written baseline conversions.")
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--input", required=True, help="CSV file, or the images IDX file")
    parser.add_argument("--labels", help="labels IDX file (images dataset)")
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--dataset", choices=("csv", "images"),
                        help="default: csv if --input ends with .csv, else images")
    args, beam_args = parser.parse_known_args(argv)
    dataset = args.dataset or ("csv" if args.input.endswith(".csv") else "images")
    if dataset == "images" and not args.labels:
        parser.error("the images dataset needs --labels")
    if beam_args and args.variant != "beam_naive":
        parser.error(f"unknown arguments: {' '.join(beam_args)}")
    os.makedirs(args.output, exist_ok=True)
    t0 = time.perf_counter()
    if args.variant == "beam_naive":
        run_beam_naive(dataset, args.input, args.labels, args.output, beam_args)
    else:
        run_tf_loop(dataset, args.input, args.labels, args.output)
    print(f"{args.variant} {dataset}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
