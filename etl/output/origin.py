"""Which job an output holds: its sources and schema name, so another job never replaces it
silently.

The manifest records `published_by` (added by the launcher before publishing, with the
run's other identity fields):

    "published_by": {"schema": "penguins_raw",
                     "sources": {"*": {"format": "csv", "paths": ["penguins-raw.csv"],
                                       "resolved": ["/data/penguins-raw.csv"]}}}

per `sources:` entry (`*`: the one `source:` split by fractions) its format and its paths as
the job file gives them, before any date placeholder is filled (so every span of a dated job is
the same job), and resolved against the job file's folder; a python source's `function`.
Not the files' contents: new content in the same inputs is the same job, rebuilt as before.

A run whose origin differs (another format, other resolved paths, another schema name) from
the one the published output records is refused before anything is written (OtherJobsOutput,
exit 2), naming both, unless `--force`. An output published by an older version, without
`published_by`, is taken as this job's own (no refusal: there is nothing to compare).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etl.base.errors import ConfigError
from etl.storage import fs

KEY = "published_by"
SHOWN_PATHS = 2  # file names a message lists before "+N more"


def strings_in(value: Any) -> list[str]:
    """Every string inside a paths value (a string, a list, or a mapping of them): what the
    job's placeholders fill (etl.job.spans, a layer above, uses this one)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in strings_in(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings_in(v)]
    return []


class OtherJobsOutput(ConfigError):
    """The output holds the dataset another job published (exit 2; `--force` replaces it)."""


def job_origin(job: Any, schema_name: str) -> dict[str, Any]:
    """What the manifest records of the job that publishes (see the module docstring)."""
    raw = job.raw if isinstance(getattr(job, "raw", None), Mapping) else {}
    entries = raw.get("sources") if "sources" in raw else {"*": raw.get("source")}
    if not isinstance(entries, Mapping):
        entries = {}
    sources: dict[str, Any] = {}
    for name, cfg in entries.items():
        if not isinstance(cfg, Mapping):
            continue
        entry: dict[str, Any] = {"format": str(cfg.get("format", ""))}
        if "paths" in cfg:
            entry["paths"] = cfg["paths"]
            entry["resolved"] = _resolved(cfg["paths"], job.base_dir)
        if "function" in cfg:
            entry["function"] = cfg["function"]
        sources[str(name)] = entry
    return {"schema": schema_name, "sources": sources}


def _resolved(paths: Any, base_dir: str) -> Any:
    """The paths value (string, list or mapping) with each string resolved against the job
    file's folder (local: absolute; gs://: as given)."""
    if isinstance(paths, str):
        try:
            return fs.resolve(base_dir, paths)
        except ValueError:
            return paths
    if isinstance(paths, Mapping):
        return {str(k): _resolved(v, base_dir) for k, v in paths.items()}
    if isinstance(paths, (list, tuple)):
        return [_resolved(v, base_dir) for v in paths]
    return paths


def _compared(origin: Mapping[str, Any]) -> Any:
    """What two origins must share to be the same job: formats, resolved paths (or a
    python source's function) per entry, and the schema name."""
    sources = origin.get("sources") if isinstance(origin.get("sources"), Mapping) else {}
    return (origin.get("schema"),
            {name: (e.get("format"), e.get("resolved"), e.get("function"))
             for name, e in sources.items() if isinstance(e, Mapping)})


def describe(origin: Mapping[str, Any], schema: bool = True) -> str:
    """`penguins-raw.csv (csv, schema penguins_raw)`: the file names it reads, its formats."""
    sources = origin.get("sources") if isinstance(origin.get("sources"), Mapping) else {}
    names: list[str] = []
    formats: list[str] = []
    for e in sources.values():
        if not isinstance(e, Mapping):
            continue
        names += [fs.basename(str(p).rstrip("/")) or str(p) for p in strings_in(e.get("paths"))]
        if e.get("function"):
            names.append(str(e["function"]))
        if e.get("format") and e["format"] not in formats:
            formats.append(str(e["format"]))
    names = list(dict.fromkeys(names))
    shown = ", ".join(names[:SHOWN_PATHS]) + (
        f" (+{len(names) - SHOWN_PATHS} more)" if len(names) > SHOWN_PATHS else "")
    how = ", ".join(formats)
    if schema:
        how += f"{', ' if how else ''}schema {origin.get('schema')}"
    return f"{shown or 'no inputs'} ({how})"


def check_same_job(output: str, published: Mapping[str, Any] | None,
                   origin: Mapping[str, Any]) -> None:
    """Refuse (OtherJobsOutput) when `published` (the output's current manifest, None when
    nothing is published) records another job than `origin`. Nothing recorded: ours."""
    if not published or not isinstance(published.get(KEY), Mapping):
        return
    theirs = published[KEY]
    if _compared(theirs) == _compared(origin):
        return
    same_schema = theirs.get("schema") == origin.get("schema")
    ours = describe(origin, schema=not same_schema)
    theirs_text = describe(theirs)
    if ours == describe(theirs, schema=not same_schema):  # same names: say where they are
        ours = _full(origin)
        theirs_text = _full(theirs)
    raise OtherJobsOutput(f"{output} holds the output of {theirs_text}; this job reads {ours}: "
                          "use another output, or --force to replace it")


def _full(origin: Mapping[str, Any]) -> str:
    """The origin with resolved paths (two jobs whose file names alone look the same)."""
    sources = origin.get("sources") if isinstance(origin.get("sources"), Mapping) else {}
    paths = [p for e in sources.values() if isinstance(e, Mapping)
             for p in strings_in(e.get("resolved"))]
    formats = list(dict.fromkeys(str(e.get("format")) for e in sources.values()
                                 if isinstance(e, Mapping)))
    shown = ", ".join(paths[:SHOWN_PATHS]) + (
        f" (+{len(paths) - SHOWN_PATHS} more)" if len(paths) > SHOWN_PATHS else "")
    return f"{shown or 'no inputs'} ({', '.join(formats)}, schema {origin.get('schema')})"
