"""`run_pipeline.py infer-schema SOURCE... [--format F] [--sample N] [--output S] [--job J]
[--checks] [--delimiter D] [--encoding E] [--no-header]`, or for a database
`infer-schema --sql-url URL --query Q [--password-env VAR] [--key COL] ...`.

Reads the first N records of each input (etl.tools.infer.sample), guesses one feature per column
(etl.tools.infer.guess) and writes a schema YAML in which every guess a person should check carries
a `# review:` comment (etl.tools.infer.render). The schema is loaded back through etl.contract.schema before
it is written, so what is written always loads; `--job` also writes a job file converting the
same inputs with it. `--checks` proposes a `checks:` block from the same sample
(etl.tools.infer.checks): in the job file with `--job`, else on standard output after the
`wrote` line. Existing files are never overwritten.

A database (`--sql-url`) is sampled through the `format: sql` reader and each feature follows its
column's declared type (etl.tools.infer.declared); the URL is only ever shown without its
password (SqlTarget.display).

CSV files are sniffed first (etl.tools.infer.dialect: encoding, delimiter, header row), null
markers found in number and date columns (etl.tools.infer.values) become the source's
`null_values:`, and one summary says what was decided and why (on standard output after the
`wrote` lines, on standard error when the schema itself goes to standard output).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import yaml

from etl.base.errors import BadInputError, ConfigError
from etl.contract.schema import Schema, schema_from_dict
from etl.formats.tfrecord import compression_of
from etl.output.layout import SCHEMA_FILE
from etl.sources import make_reader, sql_url
from etl.storage import fs
from etl.tools.infer.checks import checks_yaml
from etl.tools.infer.declared import declared
from etl.tools.infer.dialect import Dialect, sniff
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
from etl.tools.infer.summary import summary_lines
from etl.tools.infer.values import count_in, marker_counts, text_cells

FORMATS = ("csv", "jsonl", "parquet", "npy", "npz", "idx", "images", "text", "tfrecord")
_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl",
               ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet", ".npy": "npy",
               ".npz": "npz", ".txt": "text"}
_PAIRED = ("idx", "npy")


@dataclass
class Options:
    """Dialect overrides from the command line (None: sniffed)."""

    delimiter: str | None = None
    encoding: str | None = None
    header: bool | None = None


def options_of(args: Any) -> Options:
    delimiter = getattr(args, "delimiter", None)
    if delimiter is not None:
        delimiter = {"\\t": "\t", "tab": "\t", "TAB": "\t", "space": " "}.get(delimiter,
                                                                               delimiter)
    return Options(delimiter, getattr(args, "encoding", None),
                   False if getattr(args, "no_header", False) else None)


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
    fmt, source = plan_sql(args) if getattr(args, "sql_url", None) else (None, {})
    if fmt is None:
        if getattr(args, "query", None) or getattr(args, "password_env", None) or \
                getattr(args, "key", None):
            raise ConfigError("--query, --password-env and --key go with --sql-url")
        if not args.sources:
            raise ConfigError("give SOURCE files, or --sql-url URL --query Q for a database")
        fmt, source = plan(list(args.sources), args.format)
    opts = options_of(args)
    if fmt != "csv" and (opts.delimiter or opts.encoding or opts.header is not None):
        raise ConfigError(f"--delimiter, --encoding and --no-header are for CSV files, not {fmt}")
    name = args.name or default_name(fmt, source)
    inferred = infer_all(fmt, source, n, name, opts)
    text = inferred.text
    output = None
    if args.job:
        output = output_name(name, fmt, source, fs.dirname(fs.abspath(args.job)))
    summary = "\n".join(summary_lines(inferred, fmt, output)) + "\n"
    if not args.output:
        print(text, end="")
        sys.stdout.flush()
        print(summary, end="", file=sys.stderr)
        return 0
    checks = checks_yaml(inferred.guesses, inferred.sampled, fmt == "tfrecord",
                         inferred.names) if proposing else ""
    doc = ""
    if args.job:
        job_dir = fs.dirname(fs.abspath(args.job))
        header = [f"Written by `run_pipeline.py infer-schema` with {args.output}: converts the "
                  "inputs it was inferred from. Relative paths are relative to this file."]
        doc = job_yaml(header, _relative(fs.abspath(args.output), job_dir),
                       _relative_source(inferred.source, job_dir), output or "",
                       inferred.source_notes) + checks
    fs.write_bytes(args.output, text.encode())
    print(f"wrote {args.output}")
    if args.job:
        fs.write_bytes(args.job, doc.encode())
        print(f"wrote {args.job}")
    elif checks:
        print(checks, end="")
    print(summary, end="")
    return 0


def output_name(name: str, fmt: str, source: dict[str, Any], job_dir: str) -> str:
    """The job's `output:`, relative to the job file: out/<name>_<format>_<hash of the input
    paths>, so two different inputs (penguins-raw.csv, penguins_raw.parquet; two folders'
    data.csv) never share an output, and the same inputs always get the same one; never a
    folder that holds an input or lies inside one."""
    def flat(paths: Any) -> list[str]:
        return sorted(p for v in (paths.values() if isinstance(paths, dict) else [paths])
                      for p in ([v] if isinstance(v, str) else v))

    if fmt == "sql":  # the database as shown (no password) and the query
        shown = sql_url.parse(source["url"], ".", "infer-schema", source.get("password_env"))
        key = json.dumps([shown.display, source["query"]])
        return f"out/{name}_sql_{hashlib.sha1(key.encode()).hexdigest()[:6]}"
    written = flat(_relative_source(source, job_dir)["paths"])  # as the job file names them
    digest = hashlib.sha1(json.dumps(written).encode()).hexdigest()[:6]
    out = f"out/{name}_{fmt}_{digest}"
    inputs = flat(source["paths"])
    holding = [p for p in inputs if _overlaps(fs.join(job_dir, out), p)]
    if holding and fs.local_path(job_dir) is not None:  # the job lies in an input folder: beside it
        top = min(holding, key=len).rstrip("/")
        out = os.path.relpath(fs.join(fs.dirname(top), f"out/{name}_{fmt}_{digest}"), job_dir)
    return out


def _overlaps(output: str, path: str) -> bool:
    if not fs.same_storage(output, path):
        return False
    a, b = output.rstrip("/") + "/", path.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


# ---- which inputs, which format ----------------------------------------------------------------
def plan_sql(args: Any) -> tuple[str, dict[str, Any]]:
    """`--sql-url URL --query Q [--password-env VAR] [--key COL]` as a job's `format: sql`
    source entry; the URL is parsed here so a bad one is one line that never shows the
    password."""
    if args.sources or args.format not in (None, "sql"):
        raise ConfigError("--sql-url reads a database: give no SOURCE files and no --format")
    if not args.query:
        raise ConfigError("--sql-url needs --query (an SQL SELECT whose rows are the records)")
    source: dict[str, Any] = {"format": "sql", "url": args.sql_url, "query": args.query}
    if args.password_env:
        source["password_env"] = args.password_env
    if args.key:
        source["key"] = args.key
    sql_url.parse(args.sql_url, ".", "infer-schema --sql-url", args.password_env)
    return "sql", source


def plan(sources: list[str], fmt: str | None) -> tuple[str, dict[str, Any]]:
    """The format and a job source entry (absolute paths) for the command-line SOURCEs."""
    named = [s.split("=", 1) for s in sources if "=" in s and not fs.exists(s)]
    plain = [s for s in sources if "=" not in s or fs.exists(s)]
    found: list[tuple[str | None, str]] = []
    for column, pattern in [(c, p) for c, p in named] + [(None, p) for p in plain]:
        full = fs.abspath(pattern)
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
    return fmt, {"format": fmt, "paths": paths}


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
    if fmt == "sql":  # the first table the query reads from
        found = re.search(r"\bfrom\s+([\w.\"]+)", source["query"], re.IGNORECASE)
        table = found.group(1).replace('"', "").split(".")[-1] if found else "query"
        return re.sub(r"\W+", "_", table).strip("_").lower() or "query"
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
    source: dict[str, Any] = field(default_factory=dict)  # the job's source entry
    source_notes: dict[str, str] = field(default_factory=dict)  # comments on its keys
    left_out: list[str] = field(default_factory=list)
    dialect: Dialect | None = None
    markers: dict[str, dict[str, int]] = field(default_factory=dict)  # marker -> column -> n
    absent: dict[str, list[str]] = field(default_factory=dict)  # column -> files without it
    renamed: list[str] = field(default_factory=list)  # why a feature name differs
    names: list[str] = field(default_factory=list)  # the schema's feature names
    nulls: dict[str, int] = field(default_factory=dict)  # sql: column -> sampled NULLs


def infer(fmt: str, source: dict[str, Any], n: int, name: str) -> str:
    """The schema YAML for `source`, checked by etl.contract.schema."""
    return infer_all(fmt, source, n, name).text


def infer_all(fmt: str, source: dict[str, Any], n: int, name: str,
              opts: Options | None = None) -> Inferred:
    """The schema for `source` (YAML checked by etl.contract.schema), the job's source entry
    (with the sniffed dialect and null markers) and what it all came from."""
    opts = opts or Options()
    source = dict(source)
    dialect = None
    notes: dict[str, str] = {}
    absent: dict[str, list[str]] = {}
    markers: dict[str, dict[str, int]] = {}
    nulls: dict[str, int] = {}
    if fmt == "images":
        guesses, sampled, left_out = _image_folder(source, n)
    elif fmt == "sql":
        guesses, sampled, left_out, nulls, source, notes = _database(source, n)
    else:
        stored = fmt == "tfrecord"  # records pass through a run unchanged: describe them as is
        got, dialect = _file_sample(fmt, source, n, opts, notes)
        if not got.rows:
            raise BadInputError(f"{_listing(source)}: no records to infer a schema from")
        sampled = _sampled(got, n, fmt)
        absent = got.absent
        columns = {c: combine(chunks) for c, chunks in got.columns.items()
                   if not (dialect and c in dialect.left_out)}
        if fmt in ("csv", "jsonl"):
            markers = _null_markers(columns)
        guesses, left_out = _guess_columns(columns, got, sampled, stored, frozenset(markers))
        if dialect:
            left_out += [f"{c!r} ({why})" for c, why in dialect.left_out.items()]
        if markers:
            listed = ([""] if fmt == "csv" else []) + sorted(markers)
            source["null_values"] = listed
            notes["null_values"] = _markers_note(markers, fmt)
    if not guesses:
        raise BadInputError(f"{_listing(source)}: no column the schema can hold; left out: "
                            + "; ".join(left_out))
    renamed = _unique_names(guesses, stored=fmt == "tfrecord")
    text = schema_yaml(name, _header(fmt, sampled, left_out, source), guesses)
    schema = _load(text)
    return Inferred(text, schema, guesses, sampled, source, notes, left_out, dialect, markers,
                    absent, renamed, [g.name for g in guesses], nulls)


def _file_sample(fmt: str, source: dict[str, Any], n: int, opts: Options,
                 notes: dict[str, str]) -> tuple[Sample, Dialect | None]:
    """The sampled records of files, and a CSV file's sniffed dialect (written into `source`,
    a non-UTF-8 encoding into `notes`)."""
    dialect = None
    if fmt == "tfrecord":
        got = sample_examples(source["paths"], n)
    elif fmt == "csv":
        dialect = _dialect(source["paths"], opts)
        source.update(dialect.source_keys())
        if dialect.encoding != "utf-8":
            notes["encoding"] = next((x for x in dialect.notes if "UTF-8" in x),
                                     f"--encoding {dialect.encoding}")
        got = _csv_sample(source, dialect, n)
    else:
        got = sample(source, n)
    return got, dialect


def _guess_columns(columns: dict[str, Any], got: Sample, sampled: Sampled, stored: bool,
                   null_values: frozenset[str]) -> tuple[list[Guess], list[str]]:
    """(a guess per column, the columns left out with the reason)."""
    absent = got.absent
    guesses, left_out = [], []
    for column, values in columns.items():
        try:
            guesses.append(guess(column, values, sampled, stored=stored,
                                 null_values=null_values))
        except Unsupported as e:
            left_out.append(f"{column!r} ({e})")
        else:
            if column in absent:
                files = absent[column]
                guesses[-1].notes.insert(0,
                    f"not in {len(files)} of {len(got.per_file)} sampled files "
                    f"({', '.join(_short(f) for f in files[:3])}): their records have no "
                    "value here (see the default or required line)")
    return guesses, left_out


def _markers_note(markers: dict[str, dict[str, int]], fmt: str) -> str:
    """What each null marker fills: `'NA' fills 12 cells (age: 10, city: 2)`."""
    return "; ".join(
        f"{m!r} fills {sum(per.values())} cells ("
        + ", ".join(f"{c}: {k}" for c, k in list(per.items())[:4])
        + (", ..." if len(per) > 4 else "") + ")" for m, per in sorted(markers.items())
    ) + ("; '' (an empty cell) is the CSV default" if fmt == "csv" else "")


def _header(fmt: str, sampled: Sampled, left_out: list[str], source: dict[str, Any]) -> list[str]:
    """The schema file's opening comment: where it came from, what to review, what was left out."""
    header = [f"Inferred by `run_pipeline.py infer-schema` ({fmt}) from {sampled.what}.",
              "Every `# review:` comment marks a guess to check before relying on this "
              "schema (see the README, 'Schema files')."]
    if left_out:
        header.append("Left out: " + "; ".join(left_out) + ".")
    if fmt == "tfrecord":
        header += _written_with(source["paths"])
    return header


def _database(source: dict[str, Any], n: int) -> tuple[list[Guess], Sampled, list[str],
                                                        dict[str, int], dict[str, Any],
                                                        dict[str, str]]:
    """A `format: sql` source: the first `n` rows of the query through SqlReader; each
    feature from its column's declared type (etl.tools.infer.declared), NULLs counted. The
    job's source shows the URL without its password."""
    target = sql_url.parse(source["url"], ".", "infer-schema", source.get("password_env"))
    got = sample(source, n)
    if not got.rows:
        raise BadInputError(f"{target.display}: the query returns no rows to infer a schema "
                            "from")
    what = (f"all {got.rows} rows" if got.complete else f"the first {got.rows} rows") + \
        f" of the query on {target.display}"
    guesses: list[Guess] = []
    left_out: list[str] = []
    nulls: dict[str, int] = {}
    for column, chunks in got.columns.items():
        try:
            g, k = declared(column, combine(chunks))
        except Unsupported as e:
            left_out.append(f"{column!r} ({e})")
            continue
        guesses.append(g)
        if k:
            nulls[column] = k
    notes: dict[str, str] = {}
    if target.password is not None and "password_env" not in source:
        notes["url"] = ("the password given in --sql-url is not written here: name an "
                        "environment variable holding it with password_env:")
    return (guesses, Sampled(got.rows, got.complete, what), left_out, nulls,
            {**source, "url": target.display}, notes)


def _load(text: str) -> Schema:
    """The schema loaded by etl.contract.schema: what is written always loads."""
    try:
        return schema_from_dict(yaml.safe_load(text))
    except Exception as e:  # a bug here, not the user's: say what was produced
        raise ConfigError(f"the inferred schema does not load ({e}); please report it") from e


def _dialect(paths: list[str], opts: Options) -> Dialect:
    """The first file's dialect; files sniffed otherwise are named in a note."""
    found = [sniff(p, opts.delimiter, opts.encoding, opts.header) for p in paths[:20]]
    d = found[0]
    other = [p for p, f in zip(paths, found, strict=False)
             if (f.delimiter, f.encoding, f.header) != (d.delimiter, d.encoding, d.header)]
    if other and d.renamed:
        raise ConfigError(f"{_short(other[0])} and {_short(paths[0])} differ in their CSV "
                          "dialect or column names while the names need a columns: list: "
                          "infer them one at a time")
    if other:
        d.notes.append(f"{len(other)} files sniffed differently ({_short(other[0])}...): the "
                       f"first file's dialect is proposed; check them")
    return d


def _csv_sample(source: dict[str, Any], d: Dialect, n: int) -> Sample:
    """The sample through the CSV reader with the sniffed dialect (its `encoding:` too);
    null markers stay text here and are found later (etl.tools.infer.guess)."""
    return sample({k: v for k, v in source.items() if k != "null_values"}, n)


def _null_markers(columns: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Null markers (NA, N/A, NaN...) found in number and date columns -> how many cells
    of each column they fill (in text columns too, where the source's null_values would make
    them missing as well)."""
    cells = {c: text_cells(v) for c, v in columns.items() if isinstance(v, pa.Array)}
    found: set[str] = set()
    for c in cells.values():
        if c is not None:
            found |= set(marker_counts(c))
    out: dict[str, dict[str, int]] = {}
    for name, c in cells.items():
        if c is None:
            continue
        for m, k in count_in(c, sorted(found)).items():
            out.setdefault(m, {})[name] = k
    return out


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
    if source.get("format") == "sql":
        return sql_url.parse(source["url"], ".", "infer-schema", source.get("password_env")).display
    paths = source["paths"]
    flat = [p for v in paths.values() for p in ([v] if isinstance(v, str) else v)] \
        if isinstance(paths, dict) else paths
    return ", ".join(flat[:3]) + (f" (+{len(flat) - 3} more)" if len(flat) > 3 else "")


def _unique_names(guesses: list[Guess], stored: bool = False) -> list[str]:
    """Distinct feature names: a column whose name normalises to one already taken (`Species`
    and `species`) gets `_2`, `_3`...; every feature named otherwise than its column reads it
    through `source:`. Returns a line per renamed collision, for the summary."""
    seen: dict[str, str] = {}
    said = []
    for g in guesses:
        base, i = g.name, 2
        while g.name in seen:
            g.name = f"{base}_{i}"
            i += 1
        if g.name != base:
            said.append(f"{g.column!r} and {seen[base]!r} both read as feature {base}: "
                        f"{g.column!r} is feature {g.name} (source: {g.column})")
            g.notes.append(f"named {g.name}: {seen[base]!r} is feature {base} (their names are "
                           "the same once normalised)")
        seen[g.name] = g.column or g.name
        if not stored and g.column and g.name != g.column:
            g.spec["source"] = g.column
    return said


def _image_folder(source: dict[str, Any], n: int) -> tuple[list[Guess], Sampled, list[str]]:
    """Image folders: classes from the sub-folder names (all of them: a listing, not a sample),
    image shape and encoding from the headers of up to `n` images taken across the classes."""

    reader = make_reader(source, ".", "infer-schema")
    files = reader.inputs()
    skipped = _not_read(source["paths"], files)
    by_class: dict[str, list[str]] = {}
    for f in files:
        by_class.setdefault(f.rstrip("/").split("/")[-2], []).append(f)
    picked: list[str] = []
    queues = [list(v) for _, v in sorted(by_class.items())]
    while len(picked) < n and any(queues):
        for q in queues:
            if q and len(picked) < n:
                picked.append(q.pop(0))
    facts, broken = [], []
    for f in picked:
        try:
            facts.append(image_facts(fs.read_bytes(f), f))
        except Exception as e:  # Pillow raises many types for a broken file
            broken.append(f"{_short(f)} ({type(e).__name__}: {fs.first_line(e)})")
    if not facts:
        raise BadInputError(f"{_listing(source)}: no sampled image could be read: "
                            + "; ".join(broken[:3]))
    image = Guess("image", {})
    image_spec(image, facts)
    if broken:
        image.notes.append(f"{len(broken)} sampled files cannot be read as images and a run "
                           f"rejects them as bad_image: {'; '.join(broken[:3])}")
    frames = sum(1 for fmt, *_, n_frames in facts if n_frames > 1 and fmt != "MPO")
    if frames:
        source["first_frame"] = True
        image.notes.append(f"{frames} sampled files hold several frames (an animated GIF, a "
                           "multipage TIFF/WebP): the source's first_frame: true stores each "
                           "one's first frame; without it they are rejected as "
                           "unsupported_image")
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
    return [image, label, filename], Sampled(len(picked), whole, what), skipped


def _not_read(folders: list[str], read: list[str]) -> list[str]:
    """Files in the image folders that the image source does not read (other formats, files
    outside a class folder), by extension: said in the summary, not skipped silently."""
    taken = {f.rstrip("/") for f in read}
    others: dict[str, int] = {}
    for folder in folders:
        for path, _ in fs.list_dir(folder):
            if path.rstrip("/") not in taken and not fs.basename(path).startswith("."):
                ext = os.path.splitext(path)[1].lower() or "(no extension)"
                others[ext] = others.get(ext, 0) + 1
    if not others:
        return []
    listed = ", ".join(f"{k} {ext}" for ext, k in sorted(others.items()))
    return [f"{sum(others.values())} files the image source does not read ({listed}): not in "
            "the sample, and a run skips them too; convert them to PNG/JPEG to keep them"]


def _relative(path: str, base: str) -> str:
    """`path` relative to `base` when it lies below it (a job moved with its data keeps
    working); otherwise absolute."""
    if fs.local_path(path) is None or fs.local_path(base) is None:
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

    if "paths" not in source:  # a database
        return source
    return {**source, "paths": rel(source["paths"])}
