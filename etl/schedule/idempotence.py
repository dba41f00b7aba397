"""Is a published output still current? Idempotence by content, not by modification time.

A run's identity is what its output depends on: the job document (as parsed, before any
span placeholder is filled) plus the span it runs for, the schema's contract hash, and every
input file's path, size and content fingerprint (etl.schedule.fingerprint). The manifest records all of
it (`job_sha256`, `schema_sha256`, `input_files`, `run_key`). A rerun whose output has its
`_SUCCESS` and whose recorded identity equals the current one has nothing to do: it is
skipped (no lock, no pipeline) and exits 0. Anything else (no `_SUCCESS`, a manifest of an
older version without fingerprints, a changed job, schema or input, a python source) runs.

The run key names that identity, `SPAN-<12 hex>` (or `<12 hex>` without a span): two runs with
the same key would write the same data, so a second submit of a run still in progress is
recognised as the same run. Each attempt still gets its own run id (new_run_id), because
directories and gs:// versions are named by run id and created only if absent: a retry must
not meet a failed attempt's leftovers.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import uuid
from dataclasses import dataclass
from typing import Any

from etl.base.errors import ForeignEntries, VerifyError
from etl.contract.schema import load_schema
from etl.job.read_plan import plan_units
from etl.output.layout import MANIFEST, SUCCESS
from etl.output.manifest import (
    BY_SIZE,
    NOT_SEALED,
    dataset_dir,
    load_manifest,
    parse_manifest,
    verify,
)
from etl.schedule.fingerprint import NONE, with_fingerprints
from etl.storage import fs
from etl.storage.object_store import Store

log = logging.getLogger(__name__)
SKIPPED = "already published and current (inputs, schema and job unchanged)"
OLD_MANIFEST = "published without input fingerprints (by an older version): rebuilt once"
NO_INDEX = "published without index files (by an older version): rebuilt once"
JOB_CHANGED = "the job file changed (or its span)"
SCHEMA_CHANGED = "the schema changed"
DAMAGED = "the published output is damaged: {}"


@dataclass(frozen=True)
class Identity:
    """What a run's output depends on, hashed; `run_key` names it."""

    job_sha256: str
    schema_sha256: str
    inputs_sha256: str
    span: str
    run_key: str
    # the job writes index files (by default, so the job document does not say it): an
    # output an older version published without them is rebuilt once
    index: bool = False

    def manifest_fields(self) -> dict[str, Any]:
        """What the manifest records of it (besides schema_sha256 and input_files)."""
        return {"job_sha256": self.job_sha256, "inputs_sha256": self.inputs_sha256,
                "span": self.span or None, "run_key": self.run_key}


@dataclass(frozen=True)
class Verdict:
    current: bool
    reason: str  # why it is skipped (SKIPPED) or why it has to run


def span_label(job: Any) -> str:
    """The job's span as text ("" without one): `job.span` (etl.job.spans) as str, or its
    `label`/`date` when it has one."""
    span = getattr(job, "span", None)
    if span is None or span == "":
        return ""
    for attr in ("label", "date"):
        value = getattr(span, attr, None)
        if value is not None and not callable(value):
            return value.isoformat() if hasattr(value, "isoformat") else str(value)
    return span.isoformat() if hasattr(span, "isoformat") else str(span)


def _sha256(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


# job keys that change how a rerun checks the output, not what the output holds
_NOT_IN_IDENTITY = ("verify",)


def job_sha256(job: Any) -> str:
    """Hash of the job document as parsed (not its comments or layout) plus its span."""
    doc = {k: v for k, v in dict(job.raw).items() if k not in _NOT_IN_IDENTITY}
    return _sha256({"job": doc, "span": span_label(job)})


def identity(job: Any, schema_sha256: str, inputs: list[dict[str, Any]]) -> Identity:
    """`inputs`: the fingerprinted input list (etl.schedule.fingerprint.with_fingerprints)."""
    span = span_label(job)
    files = sorted((i["path"], i["num_bytes"], i.get("fingerprint_kind"), i.get("fingerprint"))
                   for i in inputs)
    inputs_sha = _sha256(files)
    job_sha = job_sha256(job)
    digest = _sha256([job_sha, schema_sha256, inputs_sha])[:12]
    token = re.sub(r"[^A-Za-z0-9_-]+", "-", span).strip("-")
    return Identity(job_sha, schema_sha256, inputs_sha, span,
                    f"{token}-{digest}" if token else digest, bool(getattr(job, "index", False)))


def new_run_id(run_key: str) -> str:
    """One attempt's id: its UTC start, 6 random hex digits, then the run key. The start comes
    first because run logs are pruned oldest first by name (etl.output.guard.prune_logs)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{uuid.uuid4().hex[:6]}-{run_key}"


def same_run(run_id: str, run_key: str) -> bool:
    """Whether `run_id` is an attempt of the run `run_key` names."""
    return bool(run_key) and run_id.endswith("-" + run_key)


def published_manifest(output: str) -> dict[str, Any] | None:
    """The manifest of the output's current data when its `_SUCCESS` is there, else None."""
    if output.startswith("gs://"):
        return _published_gcs(output)
    try:
        where = dataset_dir(output)
        if not fs.exists(fs.join(where, SUCCESS)):
            return None
        return load_manifest(where)
    except (OSError, ValueError):  # mid-swap, unreadable, not ours: the run will tell
        return None


def _published_gcs(output: str) -> dict[str, Any] | None:
    """The same through etl.storage.object_store: bounded retries, a dead store is a StorageError
    (exit 5) within ETL_STORAGE_RETRY_SECONDS, not a client library's own long retry."""

    store = Store()
    base = output.rstrip("/")
    found = store.read(f"{base}/{SUCCESS}")
    if found is None:
        return None
    try:
        version = json.loads(found[0])["version"]
    except (ValueError, KeyError, TypeError):
        return None  # not our pointer: the run refuses the output
    if not isinstance(version, str) or not version or "/" in version or version in (".", ".."):
        return None
    if store.stat(f"{base}/{version}/{SUCCESS}") is None:
        return None
    manifest = store.read(f"{base}/{version}/{MANIFEST}")
    try:
        return None if manifest is None else parse_manifest(manifest[0],
                                                            f"{base}/{version}/{MANIFEST}")
    except ValueError as e:  # not trusted: a new version is published beside it
        log.warning("%s; not trusted: the output is rebuilt", e)
        return None


def stale_reason(manifest: dict[str, Any] | None, ident: Identity,
                 inputs: list[dict[str, Any]]) -> str | None:
    """Why the published `manifest` does not match the current identity; None: current."""
    if manifest is None:
        return f"not published yet (no {SUCCESS})"
    if "job_sha256" not in manifest:
        return OLD_MANIFEST
    if manifest["job_sha256"] != ident.job_sha256:
        return JOB_CHANGED
    if manifest.get("schema_sha256") != ident.schema_sha256:
        return SCHEMA_CHANGED
    reason = inputs_reason(manifest.get("input_files", []), inputs, compare_prints=True)
    if reason:
        return reason
    if manifest.get("inputs_sha256") != ident.inputs_sha256:  # e.g. a field we do not compare
        return "the inputs changed"
    if ident.index and any("index" not in shard for info in manifest.get("splits", {}).values()
                           for shard in info.get("shards", [])):
        return NO_INDEX
    return None


def inputs_reason(recorded: list[dict[str, Any]], now: list[dict[str, Any]],
                  compare_prints: bool) -> str | None:
    """The first difference between recorded and current input files (paths, sizes, and with
    `compare_prints` fingerprints); None when there is none."""
    before = {i["path"]: i for i in recorded}
    after = {i["path"]: i for i in now}
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    if added:
        return f"new input file {added[0]}" + (f" (+{len(added) - 1} more)" if len(added) > 1 else "")
    if removed:
        return f"input file {removed[0]} is gone" + (
            f" (+{len(removed) - 1} more)" if len(removed) > 1 else "")
    for path in sorted(after):
        old, new = before[path], after[path]
        if old.get("num_bytes") != new["num_bytes"]:
            return f"input {path} changed size ({old.get('num_bytes')} -> {new['num_bytes']} bytes)"
    if not compare_prints:
        return None
    for path in sorted(after):
        old, new = before[path], after[path]
        if new.get("fingerprint_kind") == NONE:
            return f"input {path} is not a file (records made by code): always rebuilt"
        if (old.get("fingerprint_kind"), old.get("fingerprint")) != (
                new.get("fingerprint_kind"), new.get("fingerprint")):
            return (f"input {path} changed content ({old.get('fingerprint_kind')} "
                    f"{old.get('fingerprint')} -> {new.get('fingerprint')})")
    return None


def damage(output: str, full: bool = False) -> str | None:
    """What is wrong with a published output that is otherwise current, or None: the check a
    rerun makes before it skips, `verify --quick` (every listed file there with its size and,
    as recorded when it was published, its modification time and inode, or on gs:// its
    generation and crc32c; nothing unlisted: etl.output.manifest.verify), or with `full` the
    whole `verify` (every byte against its sha256). A damaged output is rebuilt, not trusted:
    any write since the publish, a flipped byte or a lost shard heals on the next scheduled
    run. An output published by an older version (no such record) is checked by sizes, and a
    warning says so."""
    try:
        checked = verify(output, quick=not full).get("checked")
    except ForeignEntries as e:  # the data is whole: still current, but say what is in there
        log.warning("%s (a rebuild of this output would refuse to replace it)", e)
        return None
    except VerifyError as e:
        return str(e)
    except (OSError, ValueError, KeyError, TypeError) as e:  # never a reason to trust it
        return f"{output}: cannot be checked: {type(e).__name__}: {fs.first_line(e)}"
    if checked == BY_SIZE:
        log.warning("%s: %s", output, NOT_SEALED)
    return None


def verdict(job: Any, full: bool | None = None) -> Verdict:
    """The check alone (for --dry-run and --only): list the inputs, compare paths and sizes
    first, and fingerprint them only when those match; a current output is then checked for
    damage (`damage`, full when `full` or the job says `verify: full`)."""

    manifest = published_manifest(job.output)
    if manifest is None:
        return Verdict(False, f"not published yet (no {SUCCESS})")
    if manifest.get("job_sha256") is None:
        return Verdict(False, OLD_MANIFEST)
    if manifest["job_sha256"] != job_sha256(job):
        return Verdict(False, JOB_CHANGED)
    schema_sha = load_schema(job.schema_path).sha256()
    if manifest.get("schema_sha256") != schema_sha:
        return Verdict(False, SCHEMA_CHANGED)
    plan = plan_units(job.sources, job.base_dir, job.path)
    quick = inputs_reason(manifest.get("input_files", []), plan.inputs, compare_prints=False)
    if quick:
        return Verdict(False, quick)
    inputs = with_fingerprints(plan.inputs)
    reason = stale_reason(manifest, identity(job, schema_sha, inputs), inputs)
    if reason is None:
        damaged = damage(job.output, job.verify == "full" if full is None else full)
        if damaged:
            return Verdict(False, DAMAGED.format(damaged))
    return Verdict(reason is None, reason or SKIPPED)


def current_reason(job: Any) -> str | None:
    """SKIPPED when `job`'s output is published and current (a run would do nothing), else
    None (`verdict(job).reason` says why it would run)."""
    v = verdict(job)
    return v.reason if v.current else None
