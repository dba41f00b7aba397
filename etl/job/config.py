"""Job files: which data, which schema, where to, how shuffled and sharded.

```yaml
schema: schemas/mnist.yaml            # relative to the job file, or absolute
sources:                              # one entry per split ...
  train: {format: idx, paths: {image: data/train-images-idx3-ubyte.gz, label: ...}}
source: {format: csv, paths: [data/*.csv]}   # ... or one source plus split fractions
split: {train: 0.8, validation: 0.1, test: 0.1}
output: out/mnist                     # local directory or gs://bucket/prefix
shuffle: {seed: 42}                   # false keeps input order; via: engine | files;
                                      # seed: "{span}" gives each day its own order
shards: 16                            # per split; or shard_size: 128MB
compression: none                     # none | gzip | zlib
format: tfrecord                      # tfrecord | array_record (ArrayRecord shards, for Grain)
index: true                           # NAME.tfrecord.index beside each shard (DALI, PyPI tfrecord);
                                      # default: true for uncompressed TFRecord shards, else false
max_bad_fraction: 0.0                 # rejected records allowed before the run fails
max_record_bytes: 64MiB               # a bigger record is rejected as oversized_record
split_bytes: 256MiB                   # large CSV/JSONL/text/Parquet/IDX/npy files: one read task per
                                      # this many bytes (0: one task per file); default: 256MiB,
                                      # but whole files on a local runner with <= 2 workers
spill_in_memory: 192MiB               # local runner: spills held in process memory up to this
stats: false                          # gather the dataset statistics while converting (stats.json);
                                      # default: true with checks:, and for `run --report`
```
Relative paths (schema, source paths, output) are relative to the job file's directory.
Source paths, `output` and a text `shuffle.seed` may hold date placeholders (`{date}`, `{YYYY}`,
`{MM}`, `{DD}`, `{span}`; etl.job.spans), filled from the run's span: `paths: [raw/{date}/*.csv]`,
`output: out/daily/{date}`. `JobConfig.raw` keeps the document as written (unfilled).
A value of the wrong type (`seed: abc`, `shards: two`, a negative size) is a ConfigError
naming the file and the key. `spill: memory` was removed (unbounded memory); `spill: disk`,
the only behaviour, is still accepted.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from etl.base.errors import ConfigError
from etl.base.units import DEFAULT_MAX_RECORD_BYTES, parse_size
from etl.base.yaml_load import MAX_BYTES, load_yaml, top_key_line
from etl.formats.shards import ARRAY_RECORD, FORMATS, TFRECORD, default_index
from etl.formats.tfrecord import COMPRESSIONS
from etl.job.checks import Checks, Lines, check_features, key_lines, parse_checks
from etl.job.spans import PLACEHOLDERS, Span, default_span, fill, fill_all, placeholders, strings_in
from etl.storage import fs

_KEYS = {"schema", "sources", "source", "split", "output", "shuffle", "shards", "shard_size",
         "compression", "max_shard_bytes", "max_bad_fraction", "temp_location", "description",
         "spill", "spill_in_memory", "max_record_bytes", "split_bytes", "verify", "allow_empty",
         "format", "index", "checks", "stats"}
VERIFY_MODES = ("quick", "full")  # what a rerun checks before it skips a span as current
DEFAULT_SPLIT_BYTES = 256 * 2**20  # one read task per this much of a large splittable file
DEFAULT_MAX_SHARD_BYTES = 256 * 10**6
# Held spills skip the page cache (see etl.shuffle.files). A fixed budget, so memory does not grow
# with the data: most of the 1M-row benchmark CSV (206 MB of spills) is held, and 10M rows
# hold no more (peak 10M / 1M RSS must stay <= 1.5x; 256 MiB measured 1.31-1.47x).
DEFAULT_SPILL_IN_MEMORY = 192 * 2**20


@dataclass(frozen=True)
class JobConfig:
    path: str
    base_dir: str
    schema_path: str
    sources: dict[str, dict[str, Any]]  # split (or "*" with fractions) -> source config
    fractions: dict[str, float]  # empty unless one source is split by fraction
    output: str
    seed: int | None  # None: keep input order
    shards: int | None
    shard_size: int | None
    compression: str
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    max_bad_fraction: float = 0.0
    temp_location: str | None = None
    spill_in_memory: int = DEFAULT_SPILL_IN_MEMORY
    split_bytes: int | None = None  # None: chosen for the runner (cli.run.read_split_bytes)
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    shuffle_via: str | None = None  # engine | files; None: files locally, engine elsewhere
    verify: str = "quick"  # before a skip: sizes (quick) or every byte (full), etl.schedule.idempotence
    allow_empty: bool = False  # a span that reads no record publishes (else exit 2)
    format: str = TFRECORD  # the shards' container: tfrecord | array_record
    index: bool = False  # an index file beside each shard (resolved: the default applied)
    raw: dict[str, Any] = field(default_factory=dict, compare=False)  # as written: unfilled
    span: str | None = None  # the date its placeholders were filled with; None: it has none
    checks: Checks | None = field(default=None, compare=False)  # quality gates (etl.job.checks)
    # gather the report's statistics in the conversion pass (stats.json): what checks: and
    # `run --report` read; off by default otherwise (benchmarks/README.md: what it costs)
    stats: bool = False
    # `--output` as given (placeholders unfilled): what another span of the same job and
    # command line writes (previous_output); None: the job file's `output:`
    output_override: str | None = field(default=None, compare=False)

    @property
    def shuffled(self) -> bool:
        return self.seed is not None

    @property
    def splits(self) -> list[str]:
        return list(self.fractions) if self.fractions else list(self.sources)


def _number(doc: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def _string(doc: Mapping[str, Any], key: str, where: str) -> str:
    value = doc[key]
    if value is None:  # `output: ~` or `output:` (YAML's null), not the home directory
        raise _KeyRefused(key, f"{where}: {key} is empty (YAML reads a bare ~ or nothing as "
                               "null, not as a home directory): write the full path")
    if not isinstance(value, str) or not value:
        raise _KeyRefused(key, f"{where}: {key} must be a path (text), got {value!r}")
    return value


class _KeyRefused(ConfigError):
    """A top-level key's value refused: `load_job` puts its line after the file's name."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


# The checkout (or the installed package's folder): an output there would replace the code.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _output_refusal(given: str, output: str, job: JobConfig) -> str | None:
    """Why `output` (the resolved path, `given` as written) cannot be an output directory
    (the rest of "refusing output GIVEN"), or None. Said at load time, before anything is
    listed or launched (also for --estimate and --dry-run); the run's guard
    (etl.output.guard) checks again what is on disk then.
    An output is replaced as a whole, so it must not be or hold the filesystem root, a home
    directory, the checkout, the job's or schema's folder, or an input's folder."""
    if _CONTROL.search(given):
        return (": it holds a control character (a line break, tab, ...): such a name "
                "breaks logs, listings and scripts; choose a plain name")
    if given.startswith("~"):
        return (": it starts with '~', which is not expanded to a home directory here "
                "(it would make a folder named '~'): write the full path")
    if fs.local_path(output) is None:  # a bucket holds none of the folders below
        return None
    real = os.path.realpath(output)
    places = [("the filesystem root", os.path.abspath(os.sep)),
              ("your home directory", os.path.expanduser("~")),
              ("the checkout of this program", _CHECKOUT),
              ("the job file's folder", fs.dirname(fs.abspath(job.path)))]
    if fs.local_path(job.schema_path) is not None:
        places.append(("the schema file's folder", os.path.dirname(job.schema_path)))
    for name, cfg in job.sources.items():
        for pattern in strings_in(cfg.get("paths")):
            try:
                full = fs.resolve(job.base_dir, pattern)
            except ValueError:
                continue
            if fs.local_path(full) is not None:
                fixed = re.split(r"[*?\[]", full, maxsplit=1)[0]  # up to the first glob character
                where = "source" if name == "*" else f"sources.{name}"
                places.append((f"the input {where}.paths {pattern!r}", full) if fixed == full
                              else (f"the folder of the input {where}.paths {pattern!r}",
                                    os.path.dirname(fixed)))
    for what, place in places:
        if place and fs.within(place, real):
            same = real == os.path.realpath(place)
            shown = "" if real == os.path.abspath(given) else f" ({real})"
            return (f"{shown}: it is {what}" if same else f"{shown}: it holds {what}") + (
                f" ({place}); the output directory is replaced as a whole, so give it a new "
                "directory of its own (e.g. out/NAME)")
    return None


def _resolve(base_dir: str, p: str) -> str:
    """A path from the job file: relative to the job file's folder (local or gs://)."""
    try:
        return fs.resolve(base_dir, p)
    except ValueError as e:
        raise ConfigError(str(e)) from e


def load_job(path: str, output: str | None = None, span: Span | None = None,
             verify_full: bool = False) -> JobConfig:
    """Read a job file, local or remote (`run gs://bucket/jobs/job.yaml`); its relative
    paths are taken against its own folder, so a job and its data can move together.
    Placeholders are filled with `span` (default: yesterday in UTC); a span given to a job
    without placeholders is a ConfigError (it would convert the same data for every date).
    `verify_full` (`run --verify-full`) overrides the job's `verify:` with full."""
    text = fs.read_text_as(path, "job file", ConfigError, limit=4 * MAX_BYTES)  # bounded: /dev/zero
    try:
        doc = load_yaml(text, path, "job file")
    except ConfigError as e:
        if not (placeholders(text) and "not valid YAML" in str(e) and "flow" in str(e)):
            raise
        raise ConfigError(f"{e}; a path with a placeholder inside [...] or {{...}} must be "
                          "quoted, e.g. paths: [\"raw/{date}/*.csv\"]") from e
    lines = key_lines(text) if isinstance(doc, Mapping) and "checks" in doc else None
    try:
        job = job_from_dict(doc, path=path, base_dir=fs.dirname(fs.abspath(path)),
                            output=output, span=span, lines=lines)
    except _KeyRefused as e:
        line = top_key_line(text, e.key)
        if line is None or not str(e).startswith(f"{path}: "):
            raise
        raise ConfigError(f"{path}:{line}: {str(e)[len(path) + 2:]}") from None
    if job.checks is not None and any(c.feature for c in job.checks.checks):
        from etl.contract.schema import load_schema  # noqa: PLC0415 - only for checks naming features

        schema = load_schema(job.schema_path)
        check_features(job.checks, schema.features, job.schema_path)
    return dataclasses.replace(job, verify="full") if verify_full else job


def templated(doc: Mapping[str, Any], output: str | None = None) -> list[str]:
    """Where a job document holds placeholders: `sources.NAME.paths`, `output` (or the
    `--output` given instead), `shuffle.seed`. Empty: the job is the same for every date."""
    found = []
    entries = doc.get("sources") if isinstance(doc.get("sources"), Mapping) else {}
    if "source" in doc:
        entries = {"*": doc["source"]}
    for name, cfg in entries.items():
        for key in TEMPLATED_KEYS:
            if isinstance(cfg, Mapping) and any(placeholders(s) for s in strings_in(cfg.get(key))):
                found.append(f"source.{key}" if name == "*" else f"sources.{name}.{key}")
    out = output if output is not None else doc.get("output")
    if isinstance(out, str) and placeholders(out):
        found.append("--output" if output is not None else "output")
    shuffle = doc.get("shuffle")
    if (isinstance(shuffle, Mapping) and isinstance(shuffle.get("seed"), str)
            and placeholders(shuffle["seed"])):
        found.append("shuffle.seed")
    return found


def _span_for(doc: Mapping[str, Any], path: str, output: str | None,
              span: Span | None) -> Span | None:
    """The span a job is filled with: the one given, yesterday (UTC) for a templated job run
    without one, None for a job without placeholders (which refuses a given span)."""
    if templated(doc, output):
        return span or default_span()
    if span is not None:
        raise ConfigError(f"{path}: the job has no date placeholders, so --date/--from would run "
                          "the same inputs to the same output for every date; put "
                          + ", ".join(f"{{{k}}}" for k in PLACEHOLDERS)
                          + " in its source paths and output (e.g. output: out/{date}), "
                          "or run it without --date/--from/--to")
    return None


def job_from_dict(doc: Any, path: str = "<job>", base_dir: str = ".",
                  output: str | None = None, span: Span | None = None,
                  lines: Lines | None = None) -> JobConfig:
    _check_keys(doc, path)
    span = _span_for(doc, path, output, span)
    sources, fractions = _sources(doc, path, span)
    schema = _string(doc, "schema", path)
    out = _output(doc, path, output, span)
    seed, via = _shuffle(doc.get("shuffle", {"seed": 0}), path, span)
    shards, shard_size = _sharding(doc, path)
    compression = _compression(doc, path)
    fmt, index = _shard_format(doc, compression, path)
    _check_spill(doc, path)
    max_bad = _number(doc, "max_bad_fraction", 0.0, path)
    if not 0 <= max_bad <= 1:
        raise ConfigError(f"{path}: max_bad_fraction must be within [0, 1], got {max_bad!r}")
    verify = doc.get("verify", "quick")
    if verify not in VERIFY_MODES:
        raise ConfigError(f"{path}: verify must be 'quick' (sizes) or 'full' (every byte) "
                          f"before a span is skipped as current, got {verify!r}")
    allow_empty = _flag(doc, "allow_empty", False, path)
    checks = parse_checks(doc.get("checks"), path, lines)
    stats = _flag(doc, "stats", checks is not None, path)
    if checks is not None and not stats:
        raise ConfigError(f"{path}: stats: false with checks: (the checks read the statistics "
                          "the conversion gathers); remove one of them")
    temp = doc.get("temp_location")
    if temp is not None and (not isinstance(temp, str) or not temp):
        raise ConfigError(f"{path}: temp_location must be a path (text), got {temp!r}")
    schema_path = _resolve(base_dir, schema)
    resolved = _resolve(os.getcwd(), out) if output else _resolve(base_dir, out)
    job = JobConfig(
        path=path, base_dir=base_dir, schema_path=schema_path,
        sources=sources, fractions=fractions, output=resolved, seed=seed, shards=shards,
        shard_size=shard_size, compression=compression, **_sizes(doc, path),
        max_bad_fraction=max_bad, temp_location=temp,
        shuffle_via=via, verify=verify, allow_empty=allow_empty, format=fmt, index=index,
        raw=dict(doc),
        span=span.name if span is not None else None,
        checks=checks, stats=stats,
        output_override=output,
    )
    refused = _output_refusal(out, job.output, job)
    if refused is not None:
        if output is not None:
            raise ConfigError(f"--output: refusing output {out!r}{refused}")
        raise _KeyRefused("output", f"{path}: refusing output {out!r}{refused}")
    return job


def _check_keys(doc: Any, path: str) -> None:
    """A mapping of known keys, `schema:` among them."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{path}: a job file must be a mapping")
    unknown = set(doc) - _KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    if "schema" not in doc:
        raise ConfigError(f"{path}: missing 'schema' (path of the schema YAML)")


def _output(doc: Mapping[str, Any], path: str, output: str | None, span: Span | None) -> str:
    """The output as given (--output wins over `output:`), its placeholders filled."""
    if output is None and "output" in doc:
        out = _string(doc, "output", path)
    else:
        out = output
    if not out:
        raise ConfigError(f"{path}: missing 'output' (or pass --output)")
    if span is not None:
        out = fill(out, span, f"{path}: {'--output' if output else 'output'}")
    return out


def _sharding(doc: Mapping[str, Any], path: str) -> tuple[int | None, int | None]:
    """(`shards:`, `shard_size:`): one of them; neither means 128 MB shards."""
    if "shards" in doc and "shard_size" in doc:
        raise ConfigError(f"{path}: give 'shards' or 'shard_size', not both")
    shards = doc.get("shards")
    if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int)
                               or shards < 1):
        raise ConfigError(f"{path}: shards must be a positive integer, got {shards!r}")
    shard_size = parse_size(doc["shard_size"], f"{path}: shard_size") if "shard_size" in doc else None
    if shards is None and shard_size is None:
        shard_size = 128 * 10**6
    return shards, shard_size


def _compression(doc: Mapping[str, Any], path: str) -> str:
    compression = str(doc.get("compression", "none")).lower()
    if compression not in COMPRESSIONS:
        raise ConfigError(f"{path}: compression must be one of {list(COMPRESSIONS)}, "
                          f"got {compression!r}")
    return compression


def _check_spill(doc: Mapping[str, Any], path: str) -> None:
    """`spill: disk` (the only behaviour) or no key; `spill: memory` was removed."""
    spill = doc.get("spill", "disk")
    if spill == "memory":
        raise ConfigError(f"{path}: spill: memory was removed because its memory use is "
                          "unbounded; remove the key to use the default (disk spills, with "
                          "spill_in_memory held in memory)")
    if spill != "disk":
        raise ConfigError(f"{path}: spill must be 'disk' (the default), got {spill!r}")


def _flag(doc: Mapping[str, Any], key: str, default: bool, path: str) -> bool:
    value = doc.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: {key} must be true or false, got {value!r}")
    return value


def _sizes(doc: Mapping[str, Any], path: str) -> dict[str, int | None]:
    """The byte sizes of the job (units allowed: 64MiB), as JobConfig fields."""
    return {
        "max_shard_bytes": parse_size(doc.get("max_shard_bytes", DEFAULT_MAX_SHARD_BYTES),
                                      f"{path}: max_shard_bytes"),
        "spill_in_memory": parse_size(doc.get("spill_in_memory", DEFAULT_SPILL_IN_MEMORY),
                                      f"{path}: spill_in_memory", allow_zero=True),
        "max_record_bytes": parse_size(doc.get("max_record_bytes", DEFAULT_MAX_RECORD_BYTES),
                                       f"{path}: max_record_bytes"),
        "split_bytes": (None if doc.get("split_bytes") is None
                        else parse_size(doc["split_bytes"], f"{path}: split_bytes",
                                        allow_zero=True)),
    }


def _shard_format(doc: Mapping[str, Any], compression: str, path: str) -> tuple[str, bool]:
    """(`format:`, `index:` with its default applied); the combinations that cannot work are
    refused here, before any work, with the reason."""
    fmt = doc.get("format", TFRECORD)
    if fmt not in FORMATS:
        raise ConfigError(f"{path}: format must be one of {list(FORMATS)}, got {fmt!r}")
    if fmt == ARRAY_RECORD and compression != "none":
        raise ConfigError(f"{path}: compression: {compression} does not apply to format: "
                          "array_record (ArrayRecord compresses each chunk itself, and a "
                          "whole-file gzip/zlib stream would lose its random access); remove "
                          "the compression key")
    index = doc.get("index")
    if index is None:
        return fmt, default_index(fmt, compression)
    if not isinstance(index, bool):
        raise ConfigError(f"{path}: index must be true or false, got {index!r}")
    if index and fmt == ARRAY_RECORD:
        raise ConfigError(f"{path}: index: true does not apply to format: array_record (an "
                          "ArrayRecord file carries its own index); remove the index key")
    if index and compression != "none":
        raise ConfigError(f"{path}: index: true needs compression: none: an index holds byte "
                          f"offsets of records, and offsets into a {compression} stream give "
                          "no random access (a reader must decompress everything before them)")
    return fmt, index


def _sources(doc: Mapping[str, Any], path: str, span: Span | None
             ) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """(split -> source entry, or "*" -> the one source; split -> fraction for that one),
    their paths filled for the span."""
    fractions: dict[str, float] = {}
    if ("sources" in doc) == ("source" in doc):
        raise ConfigError(f"{path}: give either 'sources' (one per split) or 'source' + 'split'")
    if "sources" in doc:
        sources = doc["sources"]
        if not isinstance(sources, Mapping) or not sources:
            raise ConfigError(f"{path}: 'sources' must map split names to source entries")
        if "split" in doc:
            raise ConfigError(f"{path}: 'split' fractions go with a single 'source'")
        sources = {str(k): _source(v, f"{path}: sources.{k}") for k, v in sources.items()}
    else:
        sources = {"*": _source(doc["source"], f"{path}: source")}
        split = doc.get("split") or {"train": 1.0}
        if not isinstance(split, Mapping) or not split:
            raise ConfigError(f"{path}: 'split' must map split names to fractions")
        fractions = {str(k): _number(split, k, 0.0, f"{path}: split") for k in split}
        if any(v <= 0 for v in fractions.values()) or abs(sum(fractions.values()) - 1) > 1e-6:
            raise ConfigError(f"{path}: split fractions must be positive and sum to 1, "
                              f"got {fractions}")
    if span is not None:
        sources = {k: _fill_paths(v, span, f"{path}: {'source' if k == '*' else 'sources.' + k}")
                   for k, v in sources.items()}
    for name in list(sources) + list(fractions):
        if name != "*" and not re.fullmatch(r"[A-Za-z0-9_.]+", name):
            raise ConfigError(f"{path}: split name {name!r} must be letters, digits, _ or .")
    return sources, fractions


def _shuffle(shuffle: Any, path: str, span: Span | None) -> tuple[int | None, str | None]:
    """`shuffle:` as (seed, or None to keep input order; strategy, or None for the default)."""
    via = None
    if shuffle is False:
        seed = None
    elif shuffle is True:
        seed = 0
    elif isinstance(shuffle, Mapping) and set(shuffle) <= {"seed", "via"}:
        # `seed: null` (with `via`): input order through the chosen strategy
        seed = shuffle.get("seed", 0)
        if isinstance(seed, str) and span is not None and placeholders(seed):
            seed = _filled_seed(seed, span, path)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"{path}: shuffle.seed must be an integer, got {seed!r}")
        via = shuffle.get("via")
        if via is not None and via not in ("engine", "files"):
            raise ConfigError(f"{path}: shuffle.via must be 'engine' or 'files', got {via!r}")
    else:
        raise ConfigError(f"{path}: shuffle must be false, true or {{seed: N, via: engine|files}}, "
                          f"got {shuffle!r}")
    return seed, via


# a source's settings that may hold placeholders: its files, a database source's query (the
# values are dates and day numbers etl.job.spans made itself, so nothing else reaches the SQL)
TEMPLATED_KEYS = ("paths", "query")


def _fill_paths(cfg: dict[str, Any], span: Span, where: str) -> dict[str, Any]:
    return {**cfg, **{key: fill_all(cfg[key], span, f"{where}.{key}")
                      for key in TEMPLATED_KEYS if key in cfg}}


def _filled_seed(seed: str, span: Span, path: str) -> int:
    """`seed: "{span}"` (or "{YYYY}{MM}{DD}"): each day shuffled its own way, reproducibly."""
    text = fill(seed, span, f"{path}: shuffle.seed")
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{path}: shuffle.seed {seed!r} is {text!r} for {span}, not an "
                          "integer; use {span} or digits, e.g. \"{YYYY}{MM}{DD}\"") from None


def _source(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a mapping like {{format: csv, paths: [...]}}, "
                          f"got {value!r}")
    if "format" in value and not isinstance(value["format"], str):
        raise ConfigError(f"{where}.format must be text, got {value['format']!r}")
    return dict(value)


def input_places(sources: Mapping[str, Any], base_dir: str) -> list[tuple[str, str]]:
    """("input", path) of each source path or glob of a job's `sources:`, resolved against
    the job's `base_dir`: what etl.output.remote.check_buckets looks at before anything is
    matched."""
    places = []
    for cfg in sources.values():
        for text in strings_in(cfg.get("paths") if isinstance(cfg, Mapping) else None):
            try:
                places.append(("input", fs.resolve(base_dir, text)))
            except ValueError:
                continue  # refused by the source's own check, with its own message
    return places
