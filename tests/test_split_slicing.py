"""Split slicing (issue 30): TFDS's grammar in make_dataset, open_records and torch_dataset,
exact record boundaries inside shards (5 shards of 1003 records: no slice falls on a shard
boundary), TFDS's own rounding, and one-line errors for bad slices."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from etl.read.random_access import RecordsError, open_records
from etl.read.splits import Slice, absolute, parse
from tests.helpers import TEST, TRAIN, ids_output, record_ids


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return ids_output(tmp_path_factory.mktemp("slicing"))


def tf_ids(out: str, split: str, **kw: Any) -> list[int]:
    from etl.read.dataset import make_dataset  # noqa: PLC0415 - TensorFlow only here

    ds = make_dataset(out, split=split, batch_size=128, shuffle_buffer=0, **kw)
    got: list[int] = []
    for batch in ds:
        got += batch["id"].numpy().tolist()
        np.testing.assert_array_equal(batch["x"].numpy()[:, 0], batch["id"].numpy() * 0.5)
    return got


@pytest.mark.slow
def test_layout_is_uneven(out: str) -> None:
    counts = [s.num_records for s in open_records(out, "train").shards]
    assert len(counts) == 5 and sum(counts) == TRAIN and len(set(counts)) > 1


@pytest.mark.slow
def test_halves_are_the_split_exactly(out: str) -> None:
    whole = record_ids(open_records(out, "train"))
    assert sorted(whole) == list(range(TRAIN))
    head, tail = record_ids(open_records(out, "train[:10%]")), record_ids(open_records(out, "train[10%:]"))
    assert len(head) == 100 and len(tail) == 903  # round(10 * 1003 / 100) = 100
    assert head + tail == whole and not set(head) & set(tail)
    # the same records, in the same order, through tf.data (skip/take inside shard 0)
    assert tf_ids(out, "train[:10%]") == head
    assert tf_ids(out, "train[10%:]") == tail
    assert tf_ids(out, "train") == whole


@pytest.mark.slow
@pytest.mark.parametrize("spec,cut", [
    ("train[:1000]", slice(0, 1000)),
    ("train[-5%:]", slice(-50, None)),  # round(5 * 1003 / 100) = 50
    ("train[150:450]", slice(150, 450)),  # across shard boundaries
    ("train[ 10 : 20 ]", slice(10, 20)),
    ("train[-3:]", slice(-3, None)),
    ("train[20:10]", slice(0, 0)),
])
def test_slices_pick_exact_records(out: str, spec: str, cut: slice) -> None:
    want = record_ids(open_records(out, "train"))[cut]
    assert record_ids(open_records(out, spec)) == want
    assert tf_ids(out, spec) == want


@pytest.mark.slow
def test_plus_joins_in_order(out: str) -> None:
    train, test = record_ids(open_records(out, "train")), record_ids(open_records(out, "test"))
    assert sorted(test) == list(range(10_000, 10_000 + TEST))
    assert record_ids(open_records(out, "train+test")) == train + test
    assert record_ids(open_records(out, "train[:50%] + test[:10]")) == train[:502] + test[:10]
    assert tf_ids(out, "train[:50%]+test[:10]") == train[:502] + test[:10]
    records = open_records(out, "train[:5]+test[-2:]")
    assert len(records) == 7 and int(records[6]["id"]) == test[-1]
    assert records[[0, 6]]["id"].tolist() == [train[0], test[-1]]


@pytest.mark.slow
def test_torch_dataset_takes_slices(out: str) -> None:
    pytest.importorskip("torch")
    from etl.read.torch_dataset import torch_dataset  # noqa: PLC0415

    ds = torch_dataset(out, "train+test")
    assert len(ds) == TRAIN + TEST
    assert int(ds[TRAIN]["id"]) == record_ids(open_records(out, "test"))[0]


SPECS = ["train[:33%]", "train[33%:]", "train[:10%]", "train[-5%:]", "train[12.5%:87.5%]",
         "train[-33%:-10%]", "train[:1]", "train[2:7]", "train[-3:]", "train[10%:20]",
         "train[1shard]", "train[:2shard]", "train[-1shard:]"]


@pytest.mark.parametrize("n", [10, 7, 1003])
def test_rounding_is_tfds(n: int) -> None:
    """Our boundaries equal TFDS's own (`_rel_to_abs_instr`, rounding 'closest')."""
    from tensorflow_datasets.core import splits as tfds_splits  # noqa: PLC0415

    class Info:  # the two fields TFDS reads of a SplitInfo
        num_examples = n
        shard_lengths = [n // 3, n // 3, n - 2 * (n // 3)]

    for spec in SPECS:
        rel = tfds_splits._str_to_relative_instruction(spec)
        got = tfds_splits._rel_to_abs_instr(rel, {"train": Info})
        theirs = (got.from_ or 0, n if got.to is None else got.to)
        (part,) = parse(spec)
        ours = absolute(part, Info.shard_lengths, spec)
        assert ours == (theirs[0], max(theirs)), spec


def test_rounding_by_the_formula() -> None:
    """train[:33%] of 10 records is 3 (round(3.3)); 25% of 10 is 2 (round(2.5): half to even)."""
    assert absolute(Slice("train", None, 33.0, "%"), [10]) == (0, 3)
    assert absolute(Slice("train", None, 25.0, "%"), [10]) == (0, 2)
    assert absolute(Slice("train", None, 35.0, "%"), [10]) == (0, 4)
    assert absolute(Slice("train", -5.0, None, "%"), [1003]) == (953, 1003)


@pytest.mark.slow
@pytest.mark.parametrize("spec,message", [
    ("nope[:10%]", r"split 'nope' not in manifest.json; available splits: \['test', 'train'\]"),
    ("train+nope", r"split 'nope' not in manifest.json; available splits: \['test', 'train'\]"),
    ("train[:10%", r"split 'train\[:10%': cannot read 'train\[:10%'; TFDS's syntax"),
    ("train[a:b]", r"split 'train\[a:b\]': cannot read 'train\[a:b\]'"),
    ("train[1:2:3]", r"cannot read 'train\[1:2:3\]'"),
    ("train[5]", r"'train\[5\]' names one position"),
    ("train[:2000]", r"split 'train\[:2000\]': slice \[0:2000\] out of range: 'train' has 1003 "
                     r"records"),
    ("train[-1004:]", r"slice \[-1004:1003\] out of range: 'train' has 1003 records"),
    ("train[:150%]", r"split 'train\[:150%\]': percentages must be within \[-100%, 100%\]"),
    ("train[6shard]", r"shard bound out of range: 'train' has 5 shards"),
    ("", r"split '' is empty"),
])
def test_bad_slices_say_one_line(out: str, spec: str, message: str) -> None:
    from etl.read.dataset import DatasetError, make_dataset  # noqa: PLC0415

    with pytest.raises(RecordsError, match=message) as e:
        open_records(out, spec)
    assert "\n" not in str(e.value) and str(e.value).startswith(out)
    with pytest.raises(DatasetError, match=message) as e:
        make_dataset(out, split=spec)
    assert "\n" not in str(e.value)
