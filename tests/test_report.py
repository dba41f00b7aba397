"""`report OUT [--against OUT2] [--out DIR]`: the numbers are exact against the source data,
the page is self-contained and shows its plots and sample images in a real headless browser,
drift is flagged on a drifted copy and not on an identical one, and the report files beside
the data keep the output ours (verify, the next run) without ever replacing a file that is
not ours."""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import re
import shutil
from collections import Counter, defaultdict
from html.parser import HTMLParser
from typing import Any

import numpy as np
import pytest

from etl.base.errors import ConfigError, VerifyError
from etl.contract.schema import Feature
from etl.output.manifest import dataset_dir, load_manifest, verify
from etl.output.ownership import foreign_content
from etl.stats.accumulators import SAMPLE_IMAGES, caption, label_feature
from etl.tools.report import command
from etl.tools.report.html import BAR, GRID_BG
from tests import chromium
from tests.helpers import ROOT, cli

EXAMPLES = os.path.join(ROOT, "examples")
DATA = os.path.join(EXAMPLES, "data")
IRIS_COLUMNS = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


def ok(proc: Any) -> Any:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def convert(job: str, out: str, *extra: str) -> str:
    ok(cli("run", job, "--output", out, *extra, "--runner=FnApiRunner"))
    return out


def report(path: str, against: str | None = None, out: str | None = None) -> dict[str, Any]:
    """`report` in this process (TensorFlow loaded once); the JSON it wrote."""
    assert command(argparse.Namespace(path=path, against=against, out=out)) == 0
    with open(os.path.join(out or dataset_dir(path), "report.json")) as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The demo and iris converted once for the module, plus a drifted iris: virginica
    rows dropped and sepal_length shifted by +2 (a job over a changed source)."""
    tmp = tmp_path_factory.mktemp("report")
    demo = convert(os.path.join(EXAMPLES, "demo.yaml"), str(tmp / "demo"))
    iris = convert(os.path.join(EXAMPLES, "iris.yaml"), str(tmp / "iris"))
    src = tmp / "drifted-src"
    src.mkdir()
    with open(os.path.join(DATA, "iris.csv")) as fh, open(src / "iris.csv", "w", newline="") as out:
        rows = list(csv.DictReader(fh))
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            if row["species"] != "Iris-virginica":
                row["sepal_length"] = f"{float(row['sepal_length']) + 2:.1f}"
                writer.writerow(row)
    (src / "job.yaml").write_text(json.dumps({
        "schema": os.path.join(ROOT, "schemas", "iris.yaml"),
        "source": {"format": "csv", "paths": ["iris.csv"]},
        "split": {"train": 0.8, "test": 0.2}, "shuffle": {"seed": 7}, "shards": 2}))
    drifted = convert(str(src / "job.yaml"), str(tmp / "iris-drifted"))
    return {"demo": demo, "iris": iris, "drifted": drifted, "tmp": str(tmp)}


class Page(HTMLParser):
    """What a reader sees in the page: the overview's rows (cell texts by feature) and the
    captions under the sample images of each split's card (by the card's heading)."""

    def __init__(self, text: str):
        super().__init__()
        self.overview: dict[str, list[str]] = {}
        self.captions: dict[str, list[str]] = defaultdict(list)
        self._row: str | None = None
        self._cell: list[str] | None = None
        self._h3: list[str] | None = None
        self._card = ""
        self._caption: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-feature"):
            self._row = a["data-feature"]
            self.overview[self._row] = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "h3":
            self._h3 = []
        elif tag == "figcaption":
            self._caption = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._row is not None:
            self.overview[self._row].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "h3" and self._h3 is not None:
            self._card, self._h3 = "".join(self._h3), None
        elif tag == "figcaption" and self._caption is not None:
            self.captions[self._card].append("".join(self._caption))
            self._caption = None

    def handle_data(self, data: str) -> None:
        for buf in (self._cell, self._h3, self._caption):
            if buf is not None:
                buf.append(data)


def first_labels(out: str, feature: str, n: int) -> dict[str, list[int]]:
    """The `feature` of the first n records of each split, read from the shards in the
    manifest's order with TensorFlow's own reader and tf.train.Example (not our decoder)."""
    import tensorflow as tf  # noqa: PLC0415

    found = {}
    for split, info in load_manifest(out)["splits"].items():
        paths = [os.path.join(out, s["path"]) for s in info["shards"]]
        values = []
        for raw in tf.data.TFRecordDataset(paths).take(n):
            ex = tf.train.Example.FromString(raw.numpy())
            values.extend(ex.features.feature[feature].int64_list.value)
        found[split] = values
    return found


def idx(name: str) -> np.ndarray:
    """An IDX file of the demo, parsed with NumPy alone (magic, dims, then uint8 data)."""
    with gzip.open(os.path.join(DATA, name)) as fh:
        raw = fh.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


# ---------------------------------------------------------------------- exact numbers


@pytest.mark.slow
def test_demo_report_numbers_are_exact_and_page_shows_plots_and_digits(outputs, tmp_path):
    out = outputs["demo"]
    proc = ok(cli("report", out))  # as a user runs it
    assert f"wrote {os.path.join(out, 'report.json')}" in proc.stdout
    assert f"wrote {os.path.join(out, 'report.html')}" in proc.stdout
    assert proc.stderr == ""
    with open(os.path.join(out, "report.json")) as fh:
        rep = json.load(fh)
    manifest = load_manifest(out)
    for split, source in (("train", "digits-train"), ("test", "digits-test")):
        labels = idx(f"{source}-labels-idx1-ubyte.gz")
        images = idx(f"{source}-images-idx3-ubyte.gz")
        info = rep["splits"][split]
        assert info == {"num_records": len(labels),
                        "num_bytes": manifest["splits"][split]["num_bytes"],
                        "num_shards": 4}
        label = rep["features"]["label"]["splits"][split]
        want = sorted(Counter(labels.tolist()).items())
        assert label["value_counts"] == [list(p) for p in want]
        assert label["value_counts_exact"] is True
        assert label["histogram"] == {"kind": "values", "values": [v for v, _ in want],
                                      "counts": [c for _, c in want], "exact": True}
        assert label["missing"] == 0 and label["records"] == len(labels)
        assert label["mean"] == pytest.approx(labels.mean(), rel=1e-12)
        pixels = rep["features"]["image"]["splits"][split]
        assert (pixels["min"], pixels["max"], pixels["values"]) == (
            int(images.min()), int(images.max()), images.size)
        assert pixels["sum"] == int(images.astype(np.int64).sum())
        assert pixels["zeros"] == int((images == 0).sum())
        assert pixels["histogram"]["counts"] == np.bincount(images.ravel(), minlength=17).tolist()
        assert pixels["stddev"] == pytest.approx(images.astype(np.float64).std(), rel=1e-9)
    assert rep["features"]["label"]["categorical"] is True
    assert rep["features"]["image"]["image"] is True

    # self-contained: nothing to load, every image inline
    with open(os.path.join(out, "report.html")) as fh:
        page = fh.read()
    assert not re.search(r"https?://", page), "the page names a URL"
    assert "<script" not in page and "<link" not in page and "@import" not in page
    srcs = re.findall(r"<img[^>]*\ssrc='([^']*)'", page)
    assert len(srcs) == 32  # 16 sample digits per split
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert page.count("<svg") >= 4  # records per split, pixel and label plots per split

    # each sample digit over its record's label: the first 16 records of each split, in order
    seen = Page(page)
    heads = first_labels(out, "label", SAMPLE_IMAGES)
    assert {split: len(v) for split, v in heads.items()} == {"train": 16, "test": 16}
    assert dict(seen.captions) == {split: [str(v) for v in values]
                                   for split, values in heads.items()}
    assert rep["sample_labels"] == {"per_split": 16, "feature": "label",
                                    "splits": {k: [str(v) for v in vs] for k, vs in heads.items()}}
    # the overview: one row per feature (dtype, shape, missing, summary), linking to its section
    all_labels = Counter(np.concatenate([idx(f"digits-{p}-labels-idx1-ubyte.gz")
                                         for p in ("train", "test")]).tolist())
    top, top_n = max(all_labels.items(), key=lambda p: (p[1], -p[0]))
    all_pixels = np.concatenate([idx(f"digits-{p}-images-idx3-ubyte.gz").ravel()
                                 for p in ("train", "test")])
    assert seen.overview == {
        "image": ["image", "uint8, raw", "[8, 8, 1]", "0 (0.0%)",
                  f"pixels 0..16, mean {all_pixels.mean():.4g}"],
        "label": ["label", "int64", "[]", "0 (0.0%)", f"top {top} ({top_n / 1797:.0%}); 10 distinct"],
    }
    for name in ("image", "label"):
        assert f"<a href='#feature-{name}'>{name}</a>" in page
        assert f"<h2 id='feature-{name}'>" in page

    # what a user sees: the plots' bars and the grid of digits, in real headless Chromium
    from PIL import Image  # noqa: PLC0415

    shot = chromium.screenshot(os.path.join(out, "report.html"), str(tmp_path / "shot.png"),
                               width=1200, height=2000)
    img = np.asarray(Image.open(shot).convert("RGB")).astype(np.int32)
    bar = np.array([int(BAR[i:i + 2], 16) for i in (1, 3, 5)])
    bars = np.all(img == bar, axis=-1)
    assert bars.sum() > 20_000, f"only {bars.sum()} pixels of the bar colour"
    assert bars[:400].sum() > 5_000  # the records-per-split plot near the top
    grid_bg = np.array([int(GRID_BG[i:i + 2], 16) for i in (1, 3, 5)])
    ys, xs = np.nonzero(np.all(img == grid_bg, axis=-1))
    assert ys.size > 5_000, "no image grid on screen"
    # the two grids side by side: train in the left half, test in the right, same rows
    boxes = []
    for half in (xs < 600, xs >= 600):
        assert half.sum() > 5_000, "a split's image grid is not beside the other"
        y0, y1, x0, x1 = ys[half].min(), ys[half].max(), xs[half].min(), xs[half].max()
        assert y1 - y0 < 250 and x1 - x0 < 560, (y0, y1, x0, x1)  # one compact grid each
        boxes.append((y0, y1))
        box = img[y0:y1 + 1, x0:x1 + 1]
        grey = (box[..., 0] == box[..., 1]) & (box[..., 1] == box[..., 2])
        levels = Counter(box[grey & (box[..., 0] > 20) & (box[..., 0] < 235)][:, 0].tolist())
        assert sum(levels.values()) > 3_000, "no grey digit pixels in the grid"
        assert len([v for v, n in levels.items() if n >= 32]) >= 8, levels  # many grey levels
        assert (box[grey][:, 0] <= 20).sum() > 10_000  # the digits' dark background
    assert abs(int(boxes[0][0]) - int(boxes[1][0])) < 5, boxes  # next to each other, not below
    # the bars of every plot of the bar colour: 2 image and 2 label histograms beside the
    # records-per-split plot (cards side by side: bars on both halves below the top)
    assert bars[400:, :600].sum() > 10_000 and bars[400:, 600:].sum() > 10_000


@pytest.mark.slow
def test_iris_report_matches_the_csv(outputs):
    rep = report(outputs["iris"])
    with open(os.path.join(DATA, "iris.csv")) as fh:
        rows = list(csv.DictReader(fh))
    assert sum(s["num_records"] for s in rep["splits"].values()) == len(rows) == 150
    feature = rep["features"]["features"]
    assert list(feature["splits"]["train"]["components"]) == IRIS_COLUMNS
    for column in IRIS_COLUMNS:
        values = np.array([float(r[column]) for r in rows], np.float32)  # float32 is stored
        per_split = [s["components"][column] for s in feature["splits"].values()]
        assert min(c["min"] for c in per_split) == float(values.min())
        assert max(c["max"] for c in per_split) == float(values.max())
        total = sum(c["sum"] for c in per_split)
        assert total == float(values.astype(np.float64).sum())  # exact: float32s add exactly
        assert total / 150 == float(values.astype(np.float64).mean())
        for c, s in zip(per_split, feature["splits"].values(), strict=True):
            assert c["values"] == s["records"] and c["mean"] == pytest.approx(
                c["sum"] / c["values"], rel=1e-15)
            assert c["value_counts_exact"] is True
            assert sum(n for _, n in c["value_counts"]) == s["records"]
    labels: Counter[str] = Counter()
    label = rep["features"]["label"]
    assert label["vocabulary"] == ["Iris-setosa", "Iris-versicolor", "Iris-virginica"]
    assert label["categorical"] is True
    for s in label["splits"].values():
        labels.update({t["label"]: t["count"] for t in s["top_values"]})
    assert labels == Counter(r["species"] for r in rows)

    # measurements in 0.1 cm steps: bins follow that grid (each value at a bin's centre, the
    # same number of grid points per bin), not 20 equal-width bins that alias into a comb
    for s in feature["splits"].values():
        for column in IRIS_COLUMNS:
            c = s["components"][column]
            h = c["histogram"]
            assert h["kind"] == "bins" and h["aligned"] is True and h["exact"] is True
            edges = np.array(h["edges"])
            widths = np.diff(edges)
            assert len(h["counts"]) <= 20 and np.allclose(widths, widths[0], rtol=1e-9)
            assert widths[0] == pytest.approx(round(widths[0] / 0.1) * 0.1, rel=1e-4)
            values = np.array([v for v, _ in c["value_counts"]])
            gap = np.abs(values[:, None] - edges[None, :]).min(axis=1)
            assert gap.min() > 0.049, (column, gap.min())  # half a 0.1 step from any edge
            assert sum(h["counts"]) == s["records"]
            assert edges[0] < c["min"] < edges[1] and edges[-2] < c["max"] < edges[-1]

    # the overview of the page: one row per feature; the label's top value by its name
    with open(os.path.join(outputs["iris"], "report.html")) as fh:
        seen = Page(fh.read())
    species = Counter(r["species"] for r in rows)
    top, top_n = max(species.items(), key=lambda p: (p[1], -label["vocabulary"].index(p[0])))
    measured = np.array([[float(r[c]) for c in IRIS_COLUMNS] for r in rows], np.float32)
    assert seen.overview == {
        "features": ["features", "float32", "[4]", "0 (0.0%)",
                     f"{float(measured.min()):.4g}..{float(measured.max()):.4g}, mean "
                     f"{measured.astype(np.float64).mean():.4g}"],
        "label": ["label", "int64", "[]", "0 (0.0%)", f"top {top} ({top_n / 150:.0%}); 3 distinct"],
    }
    assert seen.captions == {}  # no image feature: no sample grid
    assert "sample_labels" not in rep


def test_label_feature_is_chosen_from_the_schema():
    """The caption under a sample image: a scalar with a vocabulary first, then a scalar
    named like a label (label, class, target...), then the only low-cardinality scalar."""
    image = Feature("image", "uint8", (28, 28, 1), encoding="raw")
    kind = Feature("kind", "int64", (), vocabulary=("cat", "dog"))
    label = Feature("label", "int64", ())
    class_id = Feature("class_id", "int64", ())
    target = Feature("targetValue", "int32", ())
    idf = Feature("id", "int64", ())
    tags = Feature("tags", "bytes", (-1,))
    lab2 = Feature("label2d", "int64", (2,))  # not a scalar
    pick = lambda fs, cat=None: getattr(label_feature(fs, cat or {}), "name", None)  # noqa: E731
    assert pick([image, label, kind, idf]) == "kind"
    assert pick([image, idf, target, class_id, label]) == "label"
    assert pick([image, idf, target, class_id]) == "class_id"
    assert pick([image, idf, target]) == "targetValue"
    assert pick([image, idf, lab2, tags]) is None
    mode = Feature("mode", "bytes", ())
    assert pick([image, idf, mode], {"id": False, "mode": True}) == "mode"
    assert pick([image, idf, mode], {"id": True, "mode": True}) is None  # two: no guess
    assert caption(1, kind) == "dog" and caption(5, kind) == "5 (out of vocabulary)"
    assert caption(b"tabby", mode) == "tabby" and caption(7, label) == "7"


# ---------------------------------------------------------------------------- drift


@pytest.mark.slow
def test_against_an_identical_copy_flags_nothing_and_a_drifted_one_flags_drift(outputs):
    tmp = outputs["tmp"]
    same = report(outputs["iris"], against=outputs["iris"], out=os.path.join(tmp, "same"))
    drift = same["drift"]
    assert drift["flagged"] is False and drift["findings"] == []
    assert all(s["relative_change"] == 0 for s in drift["splits"].values())
    for f in drift["features"].values():
        for r in f["splits"].values():
            assert r["value"] == 0 and not r["flagged"]

    moved = report(outputs["drifted"], against=outputs["iris"], out=os.path.join(tmp, "moved"))
    drift = moved["drift"]
    assert drift["flagged"] is True
    assert drift["thresholds"] == {"count_relative_change": 0.1, "categorical_linf": 0.1,
                                   "numeric_jensen_shannon": 0.1}
    train = drift["splits"]["train"]
    assert train["flagged"] and train["num_records"] < train["against"]
    label = drift["features"]["label"]["splits"]["train"]
    assert label["metric"] == "linf" and label["flagged"]
    assert label["value"] == pytest.approx(1 / 3, abs=0.1)  # virginica's share went to 0
    sepal = drift["features"]["features"]["splits"]["train"]["components"]["sepal_length"]
    assert sepal["metric"] == "jensen_shannon" and sepal["flagged"]
    assert any("sepal_length" in f for f in drift["findings"])
    with open(os.path.join(tmp, "moved", "report.html")) as fh:
        page = fh.read()
    assert "drift flagged" in page and "sepal_length" in page
    # the overview marks the drifted features; against an identical copy, all ok
    assert {k: v[-1] for k, v in Page(page).overview.items()} == {"features": "drift",
                                                                  "label": "drift"}
    with open(os.path.join(tmp, "same", "report.html")) as fh:
        assert {k: v[-1] for k, v in Page(fh.read()).overview.items()} == {"features": "ok",
                                                                           "label": "ok"}
    assert not os.path.exists(os.path.join(outputs["drifted"], "report.json"))  # --out honoured


@pytest.mark.slow
def test_against_reuses_the_other_outputs_current_report(outputs, capsys):
    """Yesterday's span has its report.json beside its data: `--against` compares with it
    instead of reading that output again, and finds what a fresh pass finds; a report.json
    from an earlier run of that output is stale and not used."""
    tmp = outputs["tmp"]
    for name in ("report.json", "report.html"):  # an earlier test's report beside the data
        if os.path.exists(os.path.join(outputs["iris"], name)):
            os.remove(os.path.join(outputs["iris"], name))
    fresh = report(outputs["drifted"], against=outputs["iris"], out=os.path.join(tmp, "fresh"))
    assert "compared with the report.json" not in capsys.readouterr().out
    beside = report(outputs["iris"])  # the other output's own report, beside its data
    reused = report(outputs["drifted"], against=outputs["iris"], out=os.path.join(tmp, "reused"))
    assert f"compared with the report.json of {outputs['iris']}" in capsys.readouterr().out
    assert reused["drift"] == fresh["drift"]
    assert beside["run_id"] == json.load(open(os.path.join(outputs["iris"], "manifest.json")))[
        "run_id"]
    stale = dict(beside, run_id="an-earlier-run")
    with open(os.path.join(outputs["iris"], "report.json"), "w") as fh:
        json.dump(stale, fh)  # still ours (the marker comes first), but of another run
    again = report(outputs["drifted"], against=outputs["iris"], out=os.path.join(tmp, "again"))
    assert "compared with the report.json" not in capsys.readouterr().out
    assert again["drift"] == fresh["drift"]
    os.remove(os.path.join(outputs["iris"], "report.json"))
    os.remove(os.path.join(outputs["iris"], "report.html"))


# --------------------------------------------------- beside the data: still our output


@pytest.mark.slow
def test_report_files_keep_the_output_ours_and_foreign_ones_are_never_replaced(outputs, tmp_path):
    out = str(tmp_path / "iris")
    shutil.copytree(outputs["iris"], out)
    for name in ("report.json", "report.html"):
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))
    report(out)
    assert verify(out)["records"] == 150
    assert foreign_content(out) is None
    # the next run replacing the output accepts it as ours (and the new output has no report)
    convert(os.path.join(EXAMPLES, "iris.yaml"), out, "--force")
    assert not os.path.exists(os.path.join(out, "report.json"))
    assert verify(out)["records"] == 150

    # a report.html that is not ours: verify and the next run refuse, report never replaces it
    with open(os.path.join(out, "report.html"), "w") as fh:
        fh.write("<html>my notes</html>")
    with pytest.raises(VerifyError, match="not in the manifest: \\['report.html'\\]"):
        verify(out)
    assert "report.html" in foreign_content(out)
    with pytest.raises(ConfigError, match=f"refusing to overwrite {re.escape(out)}/report.html"):
        report(out)
    proc = cli("report", out)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: refusing to overwrite {out}/report.html: it is not "
                                   "a report written by tfrecord-etl; move it away or pass "
                                   "--out DIR")
    with open(os.path.join(out, "report.html")) as fh:
        assert fh.read() == "<html>my notes</html>"
    assert not os.path.exists(os.path.join(out, "report.json"))  # nothing half written
    proc = cli("run", os.path.join(EXAMPLES, "iris.yaml"), "--output", out, "--force",
               "--runner=FnApiRunner")
    assert proc.returncode == 2 and "report.html" in proc.stderr
    # --out writes elsewhere (read-only data, or a bucket one may not write to)
    report(out, out=str(tmp_path / "elsewhere"))
    assert sorted(os.listdir(tmp_path / "elsewhere")) == ["report.html", "report.json"]


@pytest.mark.slow
def test_report_of_something_that_is_not_an_output_names_it(tmp_path):
    proc = cli("report", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: {tmp_path}: not a published output (no _SUCCESS "
                                   f"and manifest.json in {tmp_path}); give the output "
                                   "directory of a run")


# ---------------------------------------------------------------------------- gs://


@pytest.mark.slow
def test_gcs_output_report_beside_the_current_version(tmp_path, gcs_emulator, gcs_bucket):
    """The report goes into the current version, claimed by its run's marker: verify passes,
    and a later run removes it with its version instead of refusing the prefix."""
    out = f"{gcs_bucket}/iris"
    env = gcs_emulator.env()
    job = os.path.join(EXAMPLES, "iris.yaml")
    ok(cli("run", job, "--output", out, "--runner=FnApiRunner", env=env))
    first = dataset_dir(out)
    assert command(argparse.Namespace(path=out, against=None, out=None)) == 0
    rep = json.loads(gcs_emulator.download(f"{first}/report.json"))
    assert rep["dataset_dir"] == first
    assert sum(s["num_records"] for s in rep["splits"].values()) == 150
    assert gcs_emulator.download(f"{first}/report.html").startswith(b"<!DOCTYPE html>")
    assert verify(out)["records"] == 150
    ok(cli("run", job, "--output", out, "--force", "--runner=FnApiRunner", env=env))
    ok(cli("run", job, "--output", out, "--force", "--runner=FnApiRunner", env=env))
    assert not [u for u in gcs_emulator.list(first + "/")], "the old version was not removed"
    assert verify(out)["records"] == 150


# --------------------------------------------- sequences, variable lengths and strings


@pytest.mark.slow
def test_sequence_steps_and_variable_length_strings(tmp_path):
    """Sentences (SequenceExample): tokens per record as exact length counts against the
    JSONL; a ragged string feature: top values and values per record, empty rows missing."""
    out = convert(os.path.join(EXAMPLES, "sentences.yaml"), str(tmp_path / "sentences"))
    rep = report(out)
    with open(os.path.join(DATA, "sentences.jsonl")) as fh:
        rows = [json.loads(line) for line in fh]
    tokens = rep["features"]["tokens"]
    assert tokens["sequence"] is True
    steps: Counter[int] = Counter()
    for s in tokens["splits"].values():
        steps.update({k: n for k, n in s["lengths"]["value_counts"]})
        assert s["missing"] == s["lengths"]["value_counts"][0][1]  # no steps: missing
    assert steps == Counter(len(r["tokens"]) for r in rows)
    flat = [t for r in rows for t in r["tokens"]]
    per_split = tokens["splits"].values()
    assert sum(s["values"] for s in per_split) == len(flat)
    assert min(s["min"] for s in per_split) == min(flat)
    assert max(s["max"] for s in per_split) == max(flat)
    assert sum(s["sum"] for s in per_split) == sum(flat)

    src = tmp_path / "tags"
    src.mkdir()
    (src / "schema.yaml").write_text("name: tags\nkind: example\nfeatures:\n"
                                     "  id: {dtype: int64, shape: []}\n"
                                     "  tags: {dtype: bytes, shape: [-1]}\n")
    words = ["red", "green", "blue"]
    with open(src / "d.jsonl", "w") as fh:
        for i in range(40):
            fh.write(json.dumps({"id": i, "tags": words[: i % 4]}) + "\n")
    (src / "job.yaml").write_text("schema: schema.yaml\nsource: {format: jsonl, paths: [d.jsonl]}\n"
                                  "shards: 1\n")
    tags = report(convert(str(src / "job.yaml"), str(tmp_path / "tags-out")))
    s = tags["features"]["tags"]["splits"]["train"]
    assert s["missing"] == 10 and s["records"] == 40
    assert s["top_values"] == [{"value": "red", "count": 30}, {"value": "green", "count": 20},
                               {"value": "blue", "count": 10}]
    assert s["lengths"]["value_counts"] == [[0, 10], [1, 10], [2, 10], [3, 10]]
    assert tags["features"]["tags"]["categorical"] is True


@pytest.mark.slow
def test_values_near_the_float64_limit_publish_with_unknown_moments(tmp_path):
    """1e300 is a legal float64: its square overflows, so stats.json says the sum, mean and
    stddev are unknown (null) instead of failing the run on inf, the report says so, and a
    mean check cannot pass on it."""
    (tmp_path / "s.yaml").write_text(
        "name: huge\nkind: example\nfeatures:\n"
        "  v: {dtype: float64, shape: [], encoding: raw}\n")
    rows = [1.7e308, 1.7e308, -1e300, 5.0]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"v": v}) + "\n" for v in rows))
    job = {"schema": "s.yaml", "source": {"format": "jsonl", "paths": ["d.jsonl"]},
           "output": "out", "shards": 1, "compression": "none", "shuffle": False, "stats": True}
    (tmp_path / "job.yaml").write_text(json.dumps(job))
    done = cli("run", str(tmp_path / "job.yaml"), "--runner=FnApiRunner")
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    v = stats["features"]["v"]["splits"]["train"]
    assert (v["min"], v["max"], v["values"]) == (-1e300, 1.7e308, 4)
    assert (v["sum"], v["mean"], v["stddev"]) == (None, None, None)
    report = cli("report", str(tmp_path / "out"))
    assert report.returncode == 0, report.stderr[-2000:]
    job["checks"] = {"block": {"features": {"v": {"mean": [-1, 1]}}}}
    (tmp_path / "job.yaml").write_text(json.dumps(job))
    blocked = cli("run", str(tmp_path / "job.yaml"), "--runner=FnApiRunner", "--force")
    assert blocked.returncode == 6, blocked.stderr[-2000:]
    assert "the mean overflows float64" in blocked.stderr
