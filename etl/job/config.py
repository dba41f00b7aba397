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
spill_in_memory: 64MiB                # local runner: sorted runs held in process memory instead
                                      # of spilled, up to this; default: none held; 0: none, and
                                      # fixed-size records not placed in memory either
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
from etl.formats.shards import (
    ADAPTER_FOR_FORMAT,
    DEFAULT_FORMAT,
    FormatProblem,
    ShardFormat,
    default_index,
    format_problem,
)
from etl.formats.tfrecord import COMPRESSIONS
from etl.job.checks import Checks, Lines, check_features, key_lines, parse_checks
from etl.job.spans import PLACEHOLDERS, Span, default_span, fill, fill_all, placeholders, strings_in
from etl.shuffle import STRATEGIES
from etl.storage import fs

_KEYS = {"schema", "sources", "source", "split", "output", "shuffle", "shards", "shard_size",
         "compression", "max_shard_bytes", "max_bad_fraction", "temp_location", "description",
         "spill", "spill_in_memory", "max_record_bytes", "split_bytes", "verify", "allow_empty",
         "format", "index", "checks", "stats"}
VERIFY_MODES = ("quick", "full")  # what a rerun checks before it skips a span as current
DEFAULT_SPLIT_BYTES = 256 * 2**20  # one read task per this much of a large splittable file
DEFAULT_MAX_SHARD_BYTES = 256 * 10**6
DEFAULT_SHARD_SIZE = 128 * 10**6  # neither shards: nor shard_size: given


@dataclass(frozen=True)
class Shuffle:
    """`shuffle:` and the spills' memory budget: in which order records reach their shards,
    and how they travel there."""

    seed: int | None = 0  # None: keep input order
    via: str | None = None  # engine | files; None: files locally, engine elsewhere (strategy_for)
    # files, where both stages share a process: bytes of sorted runs held in its memory instead
    # of spilled. None (unset): none held, while records of a fixed size are still placed
    # (etl.shuffle.placement); 0: neither, every run spills. Writing a spill costs less than the
    # new memory a held run takes (benchmarks/README.md, "Cold memory")
    spill_in_memory: int | None = None

    @property
    def shuffled(self) -> bool:
        return self.seed is not None

    @property
    def keeps_in_memory(self) -> bool:
        """Records may stay in the process's memory (placed, or in held runs)."""
        return self.spill_in_memory != 0

    @property
    def held_runs(self) -> int:
        """The byte budget of runs held instead of spilled."""
        return self.spill_in_memory or 0


@dataclass(frozen=True)
class Sharding:
    """`shards:` or `shard_size:`, and `max_shard_bytes:`: how many shards each split gets
    (etl.shuffle.planning.make_plan; etl.job.estimate), as one value from the job file on."""

    shards: int | None = None  # per split; None: from shard_size
    shard_size: int | None = DEFAULT_SHARD_SIZE  # bytes per shard; None: `shards` given
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES


@dataclass(frozen=True)
class Reading:
    """`split_bytes:` and `max_record_bytes:`: how inputs are cut into read tasks, and the
    largest record a read accepts."""

    split_bytes: int | None = None  # None: chosen for the runner (cli.run.read_split_bytes)
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES  # a bigger record: oversized_record


@dataclass(frozen=True)
class Acceptance:
    """`max_bad_fraction:` and `allow_empty:`: what a run's counts must be to publish."""

    max_bad_fraction: float = 0.0  # rejected records allowed before the run fails
    allow_empty: bool = False  # a span that reads no record publishes (else exit 2)


@dataclass(frozen=True)
class JobConfig:
    """A job file, parsed: where things are, then its settings as sections, each parsed by
    one function below and carried whole to the pipeline (transforms.convert.ConvertSettings).
    The code reads the sections; the flat read-only properties (`seed`, `shard_size`, ...) are
    what the tests written against the flat config read."""

    path: str
    base_dir: str
    schema_path: str
    sources: dict[str, dict[str, Any]]  # split (or "*" with fractions) -> source config
    fractions: dict[str, float]  # empty unless one source is split by fraction
    output: str
    shuffle: Shuffle = Shuffle()
    sharding: Sharding = Sharding()
    shard_format: ShardFormat = ShardFormat()  # format, compression, index (its default applied)
    reading: Reading = Reading()
    acceptance: Acceptance = Acceptance()
    temp_location: str | None = None
    verify: str = "quick"  # before a skip: sizes (quick) or every byte (full), etl.schedule.idempotence
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
        return self.shuffle.shuffled

    @property
    def splits(self) -> list[str]:
        return list(self.fractions) if self.fractions else list(self.sources)

    @property
    def seed(self) -> int | None:
        return self.shuffle.seed

    @property
    def spill_in_memory(self) -> int | None:
        return self.shuffle.spill_in_memory

    @property
    def shard_size(self) -> int | None:
        return self.sharding.shard_size

    @property
    def max_shard_bytes(self) -> int:
        return self.sharding.max_shard_bytes

    @property
    def format(self) -> str:
        return self.shard_format.kind

    @property
    def index(self) -> bool:
        return self.shard_format.index

    @property
    def split_bytes(self) -> int | None:
        return self.reading.split_bytes

    @property
    def max_record_bytes(self) -> int:
        return self.reading.max_record_bytes

    @property
    def max_bad_fraction(self) -> float:
        return self.acceptance.max_bad_fraction


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
    """A job document -> JobConfig: each section parsed by its own function (a ConfigError
    names the file and the key), then the output checked (`_output_refusal`)."""
    _check_keys(doc, path)
    span = _span_for(doc, path, output, span)
    sources, fractions = _sources(doc, path, span)
    schema = _string(doc, "schema", path)
    out = _output(doc, path, output, span)
    shuffle = _shuffle_section(doc, path, span)
    sharding = _sharding(doc, path)
    shard_format = _format_section(doc, path)
    acceptance = _acceptance(doc, path)
    verify = _verify(doc, path)
    checks, stats = _checks_and_stats(doc, path, lines)
    temp = _temp_location(doc, path)
    reading = _reading(doc, path)
    schema_path = _resolve(base_dir, schema)
    resolved = _resolve(os.getcwd(), out) if output else _resolve(base_dir, out)
    job = JobConfig(
        path=path, base_dir=base_dir, schema_path=schema_path,
        sources=sources, fractions=fractions, output=resolved, shuffle=shuffle,
        sharding=sharding, shard_format=shard_format, reading=reading, acceptance=acceptance,
        temp_location=temp, verify=verify, raw=dict(doc),
        span=span.name if span is not None else None, checks=checks, stats=stats,
        output_override=output,
    )
    refused = _output_refusal(out, job.output, job)
    if refused is not None:
        if output is not None:
            raise ConfigError(f"--output: refusing output {out!r}{refused}")
        raise _KeyRefused("output", f"{path}: refusing output {out!r}{refused}")
    return job


def _acceptance(doc: Mapping[str, Any], path: str) -> Acceptance:
    """`max_bad_fraction:` (within [0, 1]) and `allow_empty:`."""
    max_bad = _number(doc, "max_bad_fraction", 0.0, path)
    if not 0 <= max_bad <= 1:
        raise ConfigError(f"{path}: max_bad_fraction must be within [0, 1], got {max_bad!r}")
    return Acceptance(max_bad, _flag(doc, "allow_empty", False, path))


def _verify(doc: Mapping[str, Any], path: str) -> str:
    verify = doc.get("verify", "quick")
    if verify not in VERIFY_MODES:
        raise ConfigError(f"{path}: verify must be 'quick' (sizes) or 'full' (every byte) "
                          f"before a span is skipped as current, got {verify!r}")
    return str(verify)


def _checks_and_stats(doc: Mapping[str, Any], path: str,
                      lines: Lines | None) -> tuple[Checks | None, bool]:
    """`checks:` (etl.job.checks) and `stats:`, which defaults to on with checks."""
    checks = parse_checks(doc.get("checks"), path, lines)
    stats = _flag(doc, "stats", checks is not None, path)
    if checks is not None and not stats:
        raise ConfigError(f"{path}: stats: false with checks: (the checks read the statistics "
                          "the conversion gathers); remove one of them")
    return checks, stats


def _temp_location(doc: Mapping[str, Any], path: str) -> str | None:
    temp = doc.get("temp_location")
    if temp is not None and (not isinstance(temp, str) or not temp):
        raise ConfigError(f"{path}: temp_location must be a path (text), got {temp!r}")
    return temp


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


def _sharding(doc: Mapping[str, Any], path: str) -> Sharding:
    """`shards:` or `shard_size:` (neither: 128 MB shards), and `max_shard_bytes:`."""
    if "shards" in doc and "shard_size" in doc:
        raise ConfigError(f"{path}: give 'shards' or 'shard_size', not both")
    shards = doc.get("shards")
    if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int)
                               or shards < 1):
        raise ConfigError(f"{path}: shards must be a positive integer, got {shards!r}")
    shard_size = parse_size(doc["shard_size"], f"{path}: shard_size") if "shard_size" in doc else None
    if shards is None and shard_size is None:
        shard_size = DEFAULT_SHARD_SIZE
    max_shard_bytes = parse_size(doc.get("max_shard_bytes", DEFAULT_MAX_SHARD_BYTES),
                                 f"{path}: max_shard_bytes")
    return Sharding(shards, shard_size, max_shard_bytes)


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


def _reading(doc: Mapping[str, Any], path: str) -> Reading:
    """`max_record_bytes:` and `split_bytes:` (units allowed: 64MiB)."""
    max_record_bytes = parse_size(doc.get("max_record_bytes", DEFAULT_MAX_RECORD_BYTES),
                                  f"{path}: max_record_bytes")
    split_bytes = (None if doc.get("split_bytes") is None
                   else parse_size(doc["split_bytes"], f"{path}: split_bytes", allow_zero=True))
    return Reading(split_bytes, max_record_bytes)


def _format_section(doc: Mapping[str, Any], path: str) -> ShardFormat:
    """`compression:`, `format:` and `index:` (its default applied) as one ShardFormat."""
    compression = _compression(doc, path)
    kind, index = _shard_format(doc, compression, path)
    return ShardFormat(kind, compression, index)


def _shard_format(doc: Mapping[str, Any], compression: str, path: str) -> tuple[str, bool]:
    """(`format:`, `index:` with its default applied); the combinations that cannot work are
    refused here, before any work, with the reason."""
    fmt = doc.get("format", DEFAULT_FORMAT)
    _refuse(format_problem(fmt, compression, False), fmt, compression, path)
    index = doc.get("index")
    if index is None:
        return fmt, default_index(fmt, compression)
    if not isinstance(index, bool):
        raise ConfigError(f"{path}: index must be true or false, got {index!r}")
    _refuse(format_problem(fmt, compression, index), fmt, compression, path)
    return fmt, index


def _refuse(problem: FormatProblem | None, fmt: Any, compression: str, path: str) -> None:
    """The user's message for a rule of etl.formats.shards that the shard keys break."""
    if problem is None:
        return
    if problem.rule == "format":
        raise ConfigError(f"{path}: format must be one of {list(ADAPTER_FOR_FORMAT)}, "
                          f"got {fmt!r}")
    if problem.rule == "compression":
        raise ConfigError(f"{path}: compression: {compression} does not apply to format: "
                          f"{fmt} ({problem.reason}); remove the compression key")
    if problem.rule == "index":
        raise ConfigError(f"{path}: index: true does not apply to format: {fmt} "
                          f"({problem.reason}); remove the index key")
    raise ConfigError(f"{path}: index: true needs compression: none: an index holds byte "
                      f"offsets of records, and offsets into a {compression} stream give "
                      "no random access (a reader must decompress everything before them)")


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


def _shuffle_section(doc: Mapping[str, Any], path: str, span: Span | None) -> Shuffle:
    """`shuffle:` (seed, via), `spill:` and `spill_in_memory:`."""
    seed, via = _shuffle(doc.get("shuffle", {"seed": 0}), path, span)
    _check_spill(doc, path)
    in_memory = (parse_size(doc["spill_in_memory"], f"{path}: spill_in_memory", allow_zero=True)
                 if "spill_in_memory" in doc else None)
    return Shuffle(seed, via, in_memory)


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
        if via is not None and (not isinstance(via, str) or via not in STRATEGIES):  # etl.shuffle
            raise ConfigError(f"{path}: shuffle.via must be "
                              f"{' or '.join(map(repr, sorted(STRATEGIES)))}, got {via!r}")
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
