"""Unit tests of etl/tools/infer/guess.py: one sampled column -> one feature spec and the notes
a person reviews, called directly on Arrow/NumPy columns (no CLI, no files). The end-to-end
`infer-schema` tests (tests/test_infer_schema.py) run it through the command."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from etl.tools.infer.guess import Observed, Sampled, Unsupported, combine, feature_name, guess

WHOLE = Sampled(rows=6, complete=True, what="the 6 rows of t.csv")


def text(*cells: str | None) -> pa.Array:
    return pa.array(list(cells), pa.string())


def test_column_names_become_feature_keys_and_keep_their_source() -> None:
    assert feature_name("Age (years)") == "age_years"
    assert feature_name("  ") == "column"
    g = guess("Age (years)", text("31", "42", "7", "58", "19", "23"), WHOLE)
    assert g.name == "age_years" and g.column == "Age (years)"
    assert g.spec == {"dtype": "int64", "shape": [], "source": "Age (years)"}
    assert g.observed == Observed(rows=6, missing=0, values=6, low=7, high=58, integer=True)


def test_a_missing_integer_gets_a_default_below_every_sampled_value() -> None:
    g = guess("age", text("31", "42", "", "7", "58", "19"), WHOLE)
    assert g.spec == {"dtype": "int64", "shape": [], "default": -1}
    assert g.fills == "fills 1 of 6 sampled values"
    assert "empty text in 1 sampled rows is read as a missing value" in g.notes
    assert any("remove the default to reject such records as missing_required" in n
               for n in g.notes)
    assert g.observed is not None and (g.observed.missing, g.observed.values) == (1, 5)


def test_the_sources_null_markers_are_missing_values() -> None:
    g = guess("maybe", text("1", "2", "NA", "4", "5", "6"), WHOLE, null_values=frozenset({"NA"}))
    assert g.spec["dtype"] == "int64" and g.spec["default"] == -1
    assert "1 sampled values are null markers of the source's null_values: missing values" in g.notes
    # without the marker declared, "NA" is text: the column is not numbers
    assert guess("maybe", text("1", "2", "NA", "4", "5", "6"), WHOLE).spec["dtype"] == "string"


def test_numbers_with_thousands_separators_stay_text_with_a_note() -> None:
    g = guess("big", text("1,234", "2,000", "3,500", "10,000", "1", "2"), WHOLE)
    assert g.spec == {"shape": [], "dtype": "string"}
    assert g.notes[0].startswith("numbers with thousands separators ('1,234', 4 sampled values)")


def test_few_labels_become_a_vocabulary_with_their_counts() -> None:
    g = guess("species", text("setosa", "virginica", "setosa", "virginica", "setosa", "virginica"),
              WHOLE)
    assert g.spec == {"shape": [], "dtype": "int64", "vocabulary": ["setosa", "virginica"]}
    assert g.counts == {"setosa": 3, "virginica": 3} and g.kind == "vocabulary"
    assert "a value not in it is rejected as not_in_vocabulary" in g.notes[0]


def test_distinct_text_is_kept_as_strings() -> None:
    g = guess("name", text("a", "b", "c", "d", "e", "f"), WHOLE)
    assert g.spec == {"shape": [], "dtype": "string"} and g.kind == "text"


def test_iso_dates_become_dtype_date() -> None:
    g = guess("when", text("2020-01-03", "2021-02-28", "2020-12-31", "2019-07-04", "2020-01-01",
                           "2022-02-02"), WHOLE)
    assert g.spec == {"dtype": "date", "shape": []} and g.kind == "date"
    # a day that does not exist is not a date: the column stays text
    bad = guess("when", text("2020-02-30", "2021-02-28", "2020-12-31", "2019-07-04", "2020-01-01",
                             "2022-02-02"), WHOLE)
    assert bad.spec["dtype"] == "string"


def test_float64_data_chosen_as_float32_says_how_much_it_rounds() -> None:
    g = guess("f", np.array([0.1, 0.2, 1e-300, 4.0, 5.0, 6.0]), WHOLE)
    assert g.spec == {"dtype": "float32", "shape": []}
    assert g.notes == ["float32 chosen for float64 data (what FloatList holds), relative rounding "
                       "error up to 1.0e+00; exact: dtype float64, encoding raw"]
    exact = guess("f", np.array([0.5, 0.25, 4.0, 1.0, 2.0, 8.0]), WHOLE)
    assert exact.spec == {"dtype": "float32", "shape": []} and exact.notes == []


def test_28x28_uint8_arrays_are_one_channel_raw_images() -> None:
    g = guess("pixels", np.zeros((6, 28, 28), np.uint8), WHOLE)
    assert g.spec == {"dtype": "uint8", "shape": [28, 28, 1], "encoding": "raw"}
    assert g.observed is not None and g.observed.values == 6 * 784


def test_lists_of_varying_length_are_ragged_and_optional() -> None:
    g = guess("vec", pa.array([[1.0, 2.0], [3.0], [], None, [5.0, 6.0], [7.0]]), WHOLE)
    assert g.spec == {"dtype": "float32", "shape": [-1], "required": False}
    assert g.notes[0].startswith("shape [-1] variable: 0 to 2 values per row in 5 sampled rows")


def test_png_blobs_are_images_with_their_size() -> None:
    def png(w: int, h: int) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", (w, h), (1, 2, 3)).save(buf, format="PNG")
        return buf.getvalue()

    g = guess("img", pa.array([png(5, 4)] * 6, pa.binary()), WHOLE)
    assert g.spec == {"dtype": "uint8", "shape": [4, 5, 3], "encoding": "png"}
    assert g.kind == "image"
    assert g.notes == ["6 sampled images, all 4x5, PNG, mode RGB (6): shape [4, 5, 3], encoding "
                       "png (stored as the file's bytes, decoded on read); an image of another "
                       "size is rejected as wrong_shape"]


def test_unsupported_numpy_dtypes_are_refused_with_the_reason() -> None:
    with pytest.raises(Unsupported, match="NumPy dtype complex128"):
        guess("z", np.zeros(6, np.complex128), WHOLE)


def test_blocks_of_different_types_combine_into_one_column() -> None:
    same = combine([np.arange(3), np.arange(3, 5)])
    assert isinstance(same, np.ndarray) and same.tolist() == [0, 1, 2, 3, 4]
    mixed = combine([pa.array([None, None]), pa.array([1, 2]), pa.array([1.5])])
    assert mixed.to_pylist() == [None, None, 1, 2, 1.5]
