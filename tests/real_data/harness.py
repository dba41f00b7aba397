"""Public datasets as a new user converts them: infer-schema, run, read back, compare.

The oracle is independent of our readers: CSV through Python's `csv` module (the raw text of
each cell), JSON through `json`, Parquet through pyarrow's `to_pylist`. Each raw value is
turned into what the schema says the record must hold (a number parsed by Python, a label,
the text's exact bytes, a date's day count), and the records read back through
`etl.open_records` (no TensorFlow) and `etl.make_dataset` (tf.data) must be exactly those:
as multisets, since the output is shuffled. A row with a missing value and no default must
be counted as rejected, not stored.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import sysconfig
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from etl.contract.schema import Feature, Schema, load_schema
from tests.helpers import cli

SITE = Path(sysconfig.get_paths()["purelib"])


def package_file(*parts: str) -> Path:
    """A data file shipped inside an installed package (site-packages/...)."""
    path = SITE.joinpath(*parts)
    assert path.is_file(), f"{path} is not installed (pip install -e '.[test]')"
    return path


def infer(workdir: Path, inputs: Iterable[Path | str], *flags: str) -> tuple[Path, Path, str]:
    """`infer-schema INPUTS --job job.yaml -o schema.yaml` in `workdir`; (job, schema, output
    the job names). Fails the test with what the command printed when it does not exit 0."""
    job, schema = workdir / "job.yaml", workdir / "schema.yaml"
    r = cli("infer-schema", *map(str, inputs), "--job", str(job), "-o", str(schema), *flags,
            cwd=str(workdir))
    assert r.returncode == 0, f"infer-schema exit {r.returncode}:\n{r.stdout}\n{r.stderr}"
    doc = yaml.safe_load(job.read_text())
    return job, schema, str((workdir / doc["output"]).resolve())


def run(job: Path, *flags: str) -> Any:
    """`run JOB` with the local engine; the completed process."""
    return cli("run", str(job), "--progress", "none", *flags, "--runner=FnApiRunner",
               cwd=str(job.parent), timeout=600)


def manifest(out: str) -> dict[str, Any]:
    from etl.output.manifest import dataset_dir  # noqa: PLC0415 - a published version folder

    return json.loads((Path(dataset_dir(out)) / "manifest.json").read_text())


def read_back(out: str) -> list[dict[str, Any]]:
    """Every record of every split through `etl.open_records` (the TensorFlow-free reader)."""
    import etl  # noqa: PLC0415

    records: list[dict[str, Any]] = []
    for split in manifest(out)["splits"]:
        rs = etl.open_records(out, split=split)
        records.extend(rs[i] for i in range(len(rs)))
    return records


def read_back_tf(out: str) -> list[dict[str, Any]]:
    """Every record of every split through `etl.make_dataset` (tf.data), unbatched."""
    import etl  # noqa: PLC0415

    records: list[dict[str, Any]] = []
    for split in manifest(out)["splits"]:
        for batch in etl.make_dataset(out, split=split, batch_size=512, shuffle_buffer=0):
            names = list(batch)
            n = int(batch[names[0]].shape[0])
            records.extend({k: np.asarray(batch[k][i]) for k in names} for i in range(n))
    return records


# ---- the oracle ----------------------------------------------------------------------------
def source_rows(path: Path, source: dict[str, Any]) -> list[dict[str, Any]]:
    """The raw rows of one input as the job's source reads it: text cells (CSV), JSON values,
    Parquet values."""
    fmt = source["format"]
    if fmt == "csv":
        raw = path.read_bytes()
        if str(path).endswith(".gz"):
            raw = gzip.decompress(raw)
        text = raw.decode(source.get("encoding", "utf-8"))
        if text.startswith("\ufeff"):
            text = text[1:]
        rows = list(csv.reader(io.StringIO(text, newline=""),
                               delimiter=source.get("delimiter", ",")))
        for _ in range(int(source.get("skip_rows", 0))):
            rows.pop(0)
        if source.get("header", True) is False:
            names = source.get("columns") or [f"column_{i}" for i in range(len(rows[0]))]
        else:
            names = source.get("columns") or rows[0]
            rows = rows[1:]
        many = len(names) > 1
        return [dict(zip(names, r, strict=True)) for r in rows if r and (not many or any(r))]
    if fmt == "jsonl":
        text = path.read_text()
        if text.lstrip().startswith("["):  # a JSON array file: the jsonl source reads those too
            return json.loads(text)
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if fmt == "parquet":
        import pyarrow.parquet as pq  # noqa: PLC0415

        return pq.read_table(path).to_pylist()
    raise AssertionError(f"no oracle for format {fmt}")


MISSING = object()


def expected_value(f: Feature, raw: Any, nulls: set[str]) -> Any:
    """What feature `f` must hold for the raw value, as a comparable Python value; MISSING
    when the value is missing (null, a null marker)."""
    if raw is None or isinstance(raw, str) and raw in nulls:
        return MISSING
    if isinstance(raw, float) and math.isnan(raw) and f.dtype != "float32":
        return MISSING
    if f.vocabulary:
        return str(raw)
    if f.time is not None:
        return _instant(f, raw)
    if f.dtype == "bytes":
        return str(raw).encode() if not isinstance(raw, bytes) else raw
    if f.dtype.startswith("float"):
        value = float(raw)
        return float(np.float32(value)) if f.dtype == "float32" else value
    if f.dtype == "bool":
        return int(raw in (True, 1, "1", "true", "True"))
    if isinstance(raw, str):
        return int(raw.strip())
    return int(raw)


def _instant(f: Feature, raw: Any) -> int:
    """A date's day count or a timestamp's units since the epoch, by pandas (the oracle):
    naive text in the feature's zone, text with an offset converted to UTC."""
    import pandas as pd  # noqa: PLC0415

    spec = f.time
    if isinstance(raw, str):
        stamp = pd.to_datetime(raw, format=spec.format) if spec.format else pd.Timestamp(raw)
    else:
        stamp = pd.Timestamp(raw)
    if spec.kind == "date":
        assert stamp.tzinfo is None and stamp == stamp.normalize(), raw
        return int(stamp.value // 86_400_000_000_000)
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize(spec.timezone)
    per = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[spec.unit]
    assert stamp.value % per == 0, raw
    return int(stamp.value // per)


def stored_value(f: Feature, value: Any) -> Any:
    """A read-back scalar as the oracle states it."""
    v = np.asarray(value).reshape(-1)
    assert v.size == 1, f"{f.name}: expected one value, read {v!r}"
    x = v[0]
    if f.vocabulary:
        return f.vocabulary[int(x)]
    if f.dtype == "bytes":
        return bytes(x)
    if f.dtype.startswith("float"):
        return float(x)
    return int(x)


def _key(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=repr)


def check_exact(out: str, schema: Schema, rows: list[dict[str, Any]], nulls: set[str],
                *, tf_too: bool = True) -> dict[str, int]:
    """Every stored record equals the oracle's record (as multisets), every row with a missing
    value and no default was rejected, and the manifest's counts say so. Returns what was
    seen: records, rejected, filled (missing values a default filled)."""
    features = [f for f in schema.features if f.shape == ()]
    want: list[dict[str, Any]] = []
    rejected = filled = 0
    for raw in rows:
        rec: dict[str, Any] = {}
        ok = True
        for f in features:
            value = expected_value(f, raw.get(f.sources[0]), nulls)
            if value is MISSING:
                if f.default is None:
                    ok = False
                    break
                filled += 1
                value = stored_value(f, f.storage_default[0]) if not f.vocabulary else (
                    f.default if isinstance(f.default, str) else f.vocabulary[int(f.default)])
            rec[f.name] = value
        if ok:
            want.append(rec)
        else:
            rejected += 1
    got = [{f.name: stored_value(f, r[f.name]) for f in features} for r in read_back(out)]
    missing = Counter(map(_key, want)) - Counter(map(_key, got))
    extra = Counter(map(_key, got)) - Counter(map(_key, want))
    assert not missing and not extra, (
        f"{sum(missing.values())} expected records not stored, e.g. {list(missing)[:2]}; "
        f"{sum(extra.values())} stored records not expected, e.g. {list(extra)[:2]}")
    m = manifest(out)
    stored = sum(split["num_records"] for split in m["splits"].values())
    assert (stored, m["rejected"]["num_records"]) == (len(want), rejected)
    defaulted = sum(v.get("defaulted", 0) for v in m.get("missing_values", {}).values())
    assert defaulted == filled, (m.get("missing_values"), filled)
    if tf_too:
        got_tf = [{f.name: stored_value(f, r[f.name]) for f in features}
                  for r in read_back_tf(out)]
        assert Counter(map(_key, got_tf)) == Counter(map(_key, got))
    return {"records": len(want), "rejected": rejected, "filled": filled}


def job_source(job: Path) -> dict[str, Any]:
    """The job's one source (the `source:` key, or the train split's)."""
    doc = yaml.safe_load(job.read_text())
    if "source" in doc:
        return doc["source"]
    return next(iter(doc["sources"].values()))


def schema_of(schema_path: Path) -> Schema:
    return load_schema(os.fspath(schema_path))
