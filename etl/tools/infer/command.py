"""`run_pipeline.py infer-schema SOURCE... [--format F] [--sample N] [--output S] [--job J]
[--checks]`.

Reads the first N records of each input (etl.tools.infer.sample), guesses one feature per column
(etl.tools.infer.guess) and writes a schema YAML in which every guess a person should check carries
a `# review:` comment (etl.tools.infer.render). The schema is loaded back through etl.contract.schema before
it is written, so what is written always loads; `--job` also writes a job file converting the
same inputs with it. `--checks` proposes a `checks:` block from the same sample
(etl.tools.infer.checks): in the job file with `--job`, else on standard output after the
`wrote` line. Existing files are never overwritten.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import yaml

from etl.base.errors import BadInputError, ConfigError
from etl.contract.schema import Schema, schema_from_dict
from etl.formats.tfrecord import compression_of
from etl.output.layout import SCHEMA_FILE
from etl.sources import make_reader
from etl.storage import fs
from etl.tools.infer.checks import checks_yaml
from etl.tools.infer.examples import sample_examples
from etl.tools.infer.guess import (
    Guess,
    Observed,
    Sampled,
    Unsupported,
    combine,
    guess,
    image_facts,
    image_spec,
)
from etl.tools.infer.render import job_yaml, schema_yaml
from etl.tools.infer.sample import Sample, sample

FORMATS = ("csv", "jsonl", "parquet", "npy", "npz", "idx", "images", "text", "tfrecord")
_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl",
               ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet", ".npy": "npy",
               ".npz": "npz", ".txt": "text"}
_PAIRED = ("idx", "npy")


def command(args: Any) -> int:
    """The CLI entry: infer, check, write (stdout or --output, and --job)."""
    n = int(args.sample)
    if n < 1:
        raise ConfigError(f"--sample must be a positive number of records, got {n}")
    if args.job and not args.output:
        raise ConfigError("--job needs --output: the job's schema: points at the schema file")
    proposing = bool(getattr(args, "checks", False))
    if proposing and not args.output:
        raise ConfigError("--checks needs --output (and --job to put the checks: block in the "
                          "job file; without it the block is printed after the schema is "
                          "written)")
    for path in (args.output, args.job):
        if path and fs.exists(path):
            raise ConfigError(f"{path} exists; infer-schema never overwrites a file: choose "
                              "another name or remove it")
    fmt, source = plan(list(args.sources), args.format)
    name = args.name or default_name(fmt, source)
    inferred = infer_all(fmt, source, n, name)
    text = inferred.text
    if not args.output:
        print(text, end="")
        return 0
    checks = checks_yaml(inferred.guesses, inferred.sampled, fmt == "tfrecord",
                         [f.name for f in inferred.schema.features]) if proposing else ""
    doc = ""
    if args.job:
        job_dir = fs.dirname(fs.abspath(args.job))
        header = [f"Written by `run_pipeline.py infer-schema` with {args.output}: converts the "
                  "inputs it was inferred from. Relative paths are relative to this file."]
        doc = job_yaml(header, _relative(fs.abspath(args.output), job_dir),
                       _relative_source(source, job_dir), f"out/{name}") + checks
    fs.write_bytes(args.output, text.encode())
    print(f"wrote {args.output}")
    if args.job:
        fs.write_bytes(args.job, doc.encode())
        print(f"wrote {args.job}")
    elif checks:
        print(checks, end="")
    return 0


# ---- which inputs, which format ----------------------------------------------------------------
def plan(sources: list[str], fmt: str | None) -> tuple[str, dict[str, Any]]:
    """The format and a job source entry (absolute paths) for the command-line SOURCEs."""
    named = [s.split("=", 1) for s in sources if "=" in s and not fs.exists(s)]
    plain = [s for s in sources if "=" not in s or fs.exists(s)]
    found: list[tuple[str | None, str]] = []
    for column, pattern in [(c, p) for c, p in named] + [(None, p) for p in plain]:
        full = fs.abspath(pattern) if not fs.is_remote(pattern) else pattern
        if fs.isdir(full):
            found.append((column, full.rstrip("/")))
            continue
        matched = fs.expand(full)
        if not matched:
            raise ConfigError(f"{pattern}: no such file (and no file matches it)")
        found += [(column, m) for m in matched]
    fmt = fmt or _detect(found)
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {list(FORMATS)}, got {fmt!r}")
    paths = [p for _, p in found]
    if fmt == "images":
        dirs = [p for p in paths if fs.isdir(p)]
        if dirs != paths:
            raise ConfigError(f"images: give image folders (root/<class>/<file>), got files "
                              f"{[p for p in paths if p not in dirs][:3]}")
        return fmt, {"format": fmt, "paths": paths}
    if fmt in _PAIRED:
        columns: dict[str, list[str]] = {}
        for column, p in found:
            columns.setdefault(column or _column_of(fmt, p), []).append(p)
        counts = {c: len(v) for c, v in columns.items()}
        if len(set(counts.values())) > 1:
            raise ConfigError(f"{fmt}: each column needs as many files as the others, got "
                              f"{counts}; name them NAME=FILE")
        return fmt, {"format": fmt, "paths": {c: v[0] if len(v) == 1 else sorted(v)
                                               for c, v in columns.items()}}
    source: dict[str, Any] = {"format": fmt, "paths": paths}
    if fmt == "csv" and all(p.lower().removesuffix(".gz").endswith(".tsv") for p in paths):
        source["delimiter"] = "\t"
    return fmt, source


def _detect(found: list[tuple[str | None, str]]) -> str:
    formats = {_format_of(p) for _, p in found}
    if len(formats) != 1 or None in formats:
        listed = ", ".join(sorted(f or "unknown" for f in formats))
        raise ConfigError(f"cannot tell the format from the file names ({listed}): pass "
                          f"--format (one of {', '.join(FORMATS)})")
    return formats.pop()  # type: ignore[return-value]


def _format_of(path: str) -> str | None:
    if fs.isdir(path):
        return "images"
    name = fs.basename(path).lower()
    base = name.removesuffix(".gz")
    if re.search(r"idx\d-ubyte$", base):
        return "idx"
    if compression_of(name) != "none":  # the suffixes the TFRecord reader decompresses
        name = os.path.splitext(name)[0]
    if name.endswith((".tfrecord", ".tfrecords")):
        return "tfrecord"
    return _EXTENSIONS.get(os.path.splitext(base)[1])


def _column_of(fmt: str, path: str) -> str:
    """A column name from a file name: `train-images-idx3-ubyte.gz` -> image, `x.npy` -> x."""
    base = fs.basename(path).lower().removesuffix(".gz")
    if fmt == "idx":
        words = [w for w in re.split(r"[-_.]", base) if w]
        at = next((i for i, w in enumerate(words) if re.fullmatch(r"idx\d", w)), len(words))
        word = words[at - 1] if at else "values"
        return {"images": "image", "labels": "label"}.get(word, word)
    return re.sub(r"\W+", "_", os.path.splitext(base)[0]).strip("_") or "values"


def default_name(fmt: str, source: dict[str, Any]) -> str:
    paths = source["paths"]
    files = [p for v in paths.values() for p in ([v] if isinstance(v, str) else v)] \
        if isinstance(paths, dict) else list(paths)
    names = [fs.basename(p.rstrip("/")).lower() for p in files]
    if fmt == "tfrecord":  # shards: train-00003-of-00008.tfrecord -> train
        names = [re.sub(r"[-_]\d+[-_]of[-_]\d+", "", n).split(".")[0] for n in names]
    words = [[w for w in re.split(r"[-_.]", n) if w] for n in names]
    if len(words) == 1:
        common = words[0][:1] if fmt in _PAIRED else [names[0].split(".")[0]]
    else:
        common = []
        for column in zip(*words, strict=False):
            if len(set(column)) > 1:
                break
            common.append(column[0])
    name = re.sub(r"\W+", "_", "_".join(common)).strip("_").lower()
    if not name and fmt == "tfrecord":  # train and test shards of one output: its folder
        folders = {fs.dirname(p) for p in files}
        if len(folders) == 1:
            name = re.sub(r"\W+", "_", fs.basename(folders.pop().rstrip("/"))).strip("_").lower()
    return name or "data"


# ---- inference -------------------------------------------------------------------------------
@dataclass
class Inferred:
    text: str  # the schema YAML, with its comments
    schema: Schema  # that text, loaded
    guesses: list[Guess]
    sampled: Sampled


def infer(fmt: str, source: dict[str, Any], n: int, name: str) -> str:
    """The schema YAML for `source`, checked by etl.contract.schema."""
    return infer_all(fmt, source, n, name).text


def infer_all(fmt: str, source: dict[str, Any], n: int, name: str) -> Inferred:
    """The schema for `source` (YAML checked by etl.contract.schema) and what it came from."""
    if fmt == "images":
        guesses, sampled, left_out = _image_folder(source, n)
    else:
        stored = fmt == "tfrecord"  # records pass through a run unchanged: describe them as is
        if stored:

            got = sample_examples(source["paths"], n)
        else:
            got = sample(source, n)
        if not got.rows:
            raise BadInputError(f"{_listing(source)}: no records to infer a schema from")
        sampled = _sampled(got, n, fmt)
        guesses, left_out = [], []
        for column, chunks in got.columns.items():
            try:
                guesses.append(guess(column, combine(chunks), sampled, stored=stored))
            except Unsupported as e:
                left_out.append(f"{column!r} ({e})")
    if not guesses:
        raise BadInputError(f"{_listing(source)}: no column the schema can hold; left out: "
                            + "; ".join(left_out))
    _unique_names(guesses)
    header = [f"Inferred by `run_pipeline.py infer-schema` ({fmt}) from {sampled.what}.",
              "Every `# review:` comment marks a guess to check before relying on this "
              "schema (see the README, 'Schema files')."]
    if left_out:
        header.append("Columns left out: " + "; ".join(left_out) + ".")
    if fmt == "tfrecord":
        header += _written_with(source["paths"])
    text = schema_yaml(name, header, guesses)
    try:
        schema = schema_from_dict(yaml.safe_load(text))
    except Exception as e:  # a bug here, not the user's: say what was produced
        raise ConfigError(f"the inferred schema does not load ({e}); please report it") from e
    return Inferred(text, schema, guesses, sampled)


def _written_with(paths: list[str]) -> list[str]:
    """A note when the TFRecords lie in an output of this tool: its schema.yaml is exact."""
    beside = sorted({fs.join(fs.dirname(p), SCHEMA_FILE) for p in paths})
    found = [s for s in beside if fs.exists(s)]
    if not found:
        return []
    return [f"review: {', '.join(found[:2])} lies beside these files: if they were written with "
            "it, that schema is exact (vocabularies, encodings, shapes) and this one only "
            "describes the stored lists."]


def _sampled(got: Sample, n: int, fmt: str) -> Sampled:
    files = len(got.per_file)
    unit = "file sets" if fmt in _PAIRED else "files"
    if got.complete:
        what = (f"all {got.rows} records of {_short(next(iter(got.per_file)))}" if files == 1
                else f"all {got.rows} records of its {files} {unit}")
    else:
        what = (f"the first {got.rows} records of {_short(next(iter(got.per_file)))}"
                if files == 1 else f"the first (up to {n}) records of each of its {files} "
                f"{unit}, {got.rows} in all")
    return Sampled(got.rows, got.complete, what)


def _short(path: str) -> str:
    return fs.basename(path.rstrip("/")) or path


def _listing(source: dict[str, Any]) -> str:
    paths = source["paths"]
    flat = [p for v in paths.values() for p in ([v] if isinstance(v, str) else v)] \
        if isinstance(paths, dict) else paths
    return ", ".join(flat[:3]) + (f" (+{len(flat) - 3} more)" if len(flat) > 3 else "")


def _unique_names(guesses: list[Guess]) -> None:
    seen: set[str] = set()
    for g in guesses:
        base, i = g.name, 2
        while g.name in seen:
            g.name = f"{base}_{i}"
            i += 1
        seen.add(g.name)


def _image_folder(source: dict[str, Any], n: int) -> tuple[list[Guess], Sampled, list[str]]:
    """Image folders: classes from the sub-folder names (all of them: a listing, not a sample),
    image shape and encoding from the headers of up to `n` images taken across the classes."""

    reader = make_reader(source, ".", "infer-schema")
    files = reader.inputs()
    by_class: dict[str, list[str]] = {}
    for f in files:
        by_class.setdefault(f.rstrip("/").split("/")[-2], []).append(f)
    picked: list[str] = []
    queues = [list(v) for _, v in sorted(by_class.items())]
    while len(picked) < n and any(queues):
        for q in queues:
            if q and len(picked) < n:
                picked.append(q.pop(0))
    facts = []
    for f in picked:
        try:
            facts.append(image_facts(fs.read_bytes(f), f))
        except Exception as e:  # Pillow raises many types for a broken file
            raise BadInputError(f"{f}: cannot read image header ({type(e).__name__}: "
                                f"{fs.first_line(e)}); fix or remove it before inferring a "
                                "schema") from e
    image = Guess("image", {})
    image_spec(image, facts)
    classes = sorted(by_class)
    label = Guess("label", {"dtype": "int64", "shape": [], "vocabulary": classes},
                  counts={c: len(by_class[c]) for c in classes}, counted="images",
                  observed=Observed(len(files), 0, len(files), distinct=len(classes)))
    label.notes.append(f"vocabulary: the {len(classes)} class folder names, sorted (ids 0.."
                       f"{len(classes) - 1}); an image in a folder not listed here would be "
                       "rejected as not_in_vocabulary")
    filename = Guess("filename", {"dtype": "string", "shape": []})
    filename.notes.append("the image's path below its root folder: keeps records traceable; "
                          "remove this feature if you do not need it")
    whole = len(picked) == len(files)
    what = (f"{'all' if whole else 'the headers of'} {len(picked)} images"
            f"{'' if whole else f' of {len(files)}'} in {len(classes)} class folders of "
            f"{', '.join(_short(p) for p in source['paths'])}")
    return [image, label, filename], Sampled(len(picked), whole, what), []


def _relative(path: str, base: str) -> str:
    """`path` relative to `base` when it lies below it (a job moved with its data keeps
    working); otherwise absolute."""
    if fs.is_remote(path) or fs.is_remote(base):
        return path
    rel = os.path.relpath(path, base)
    return path if rel.startswith("..") else rel


def _relative_source(source: dict[str, Any], base: str) -> dict[str, Any]:
    def rel(v: Any) -> Any:
        if isinstance(v, str):
            return _relative(v, base)
        if isinstance(v, list):
            return [rel(x) for x in v]
        return {k: rel(x) for k, x in v.items()}

    return {**source, "paths": rel(source["paths"])}
