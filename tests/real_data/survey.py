"""The public datasets as a table: what infer-schema proposed, what a run stored exactly and
what it refused, with the reasons. `python -m tests.real_data.survey [--out DIR]` prints it as
Markdown (the table of the issue-27 closing note is this output).

Each dataset goes through the same steps as tests/real_data/test_public_datasets.py and is
compared value by value with the independent reading of tests/real_data/harness.py; a
dataset that does not convert prints the one line the user saw instead of failing.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from tests.real_data import harness as h
from tests.real_data.test_public_datasets import DATASETS


def survey_one(workdir: Path, parts: tuple[str, ...], flags: tuple[str, ...]) -> list[str]:
    src = h.package_file(*parts)
    data = workdir / src.name
    shutil.copy(src, data)
    try:
        job, schema_path, out = h.infer(workdir, [data.name], *flags)
    except AssertionError as e:
        return [src.name, "?", "?", "-", "infer-schema: " + _last_line(str(e))]
    schema = h.schema_of(schema_path)
    source = h.job_source(job)
    rows = h.source_rows(data, source)
    columns = len(rows[0]) if rows else 0
    r = h.run(job)
    if r.returncode != 0:
        return [src.name, str(len(rows)), str(columns), "-",
                f"run exit {r.returncode}: {_last_line(r.stderr)}"]
    try:
        seen = h.check_exact(out, schema, rows, set(source.get("null_values", [""])),
                             tf_too=False)
    except AssertionError as e:
        return [src.name, str(len(rows)), str(columns), "NOT EXACT", _last_line(str(e))]
    reasons = h.manifest(out)["rejected"]["by_reason"]
    stored = f"{seen['records']} records x {len(schema.features)} features"
    kinds = sorted({(f.time.kind if f.time else f.dtype) + ("/vocab" if f.vocabulary else "")
                    for f in schema.features})
    refused = ", ".join(f"{n} {code}" for code, n in reasons.items()) or "none"
    if seen["filled"]:
        refused += f"; {seen['filled']} missing values filled by a default"
    left_out = columns - len({s for f in schema.features for s in f.sources})
    if left_out > 0:
        refused += f"; {left_out} column(s) not in the schema"
    return [src.name, str(len(rows)), str(columns), f"{stored} ({', '.join(kinds)})", refused]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "").strip()[:160]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="work folder (default: a temporary one)")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="survey-"))
    print("| file | rows | columns | stored exactly | refused / rejected |")
    print("|---|---:|---:|---|---|")
    for name, parts, flags in DATASETS:
        workdir = root / name
        workdir.mkdir(parents=True, exist_ok=True)
        print("| " + " | ".join(survey_one(workdir, parts, flags)) + " |", flush=True)


if __name__ == "__main__":
    main()
