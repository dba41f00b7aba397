"""What a run does with its checks, between its last count and its publish.

`run_checks`: the staged dataset's statistics (etl.quality.stats), the previous published
span's, and every check's result (etl.quality.evaluate). `block`: a failed `block:` check puts
the staged dataset into quarantine (etl.output.quarantine) with checks.json and the page (the
report with the failed checks on top) and returns the BlockedError (exit 6) the run raises.
`still_blocked`: a rerun of a span whose very run (same run key: job, span, schema, inputs) is
in quarantine stays blocked without running again, unless accepted.
"""

from __future__ import annotations

import html
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from etl.base import signals
from etl.base.errors import BlockedError
from etl.base.quiet import native_stderr_quiet
from etl.job.config import JobConfig
from etl.output import quarantine
from etl.output.manifest import published_run
from etl.quality.evaluate import NO_PREVIOUS, Result, evaluate, fmt
from etl.quality.stats import baseline, staged_stats
from etl.stats.drift import compare
from etl.tools.report.html import render

log = logging.getLogger(__name__)
CHECKS_FORMAT = 1


@dataclass
class Gate:
    results: list[Result]
    previous: str | None  # the output drift compared with; None: nothing published before
    report: dict[str, Any] = field(default_factory=dict)
    samples: dict[tuple[str, str], list[np.ndarray]] = field(default_factory=dict)
    baseline_note: str = ""  # a damaged previous output passed over (etl.quality.stats.baseline)

    @property
    def blocked(self) -> list[Result]:
        return [r for r in self.results if r.level == "block" and not r.passed]

    @property
    def warned(self) -> list[Result]:
        return [r for r in self.results if r.level == "warn" and not r.passed]

    def lines(self) -> list[str]:
        """One line per failed check (blocks first), and one saying drift had nothing to
        compare with when that is so."""
        out = [r.line() for r in self.blocked + self.warned]
        if self.baseline_note:
            out.append(self.baseline_note)
        elif self.previous is None and any(r.note == NO_PREVIOUS for r in self.results):
            out.append(f"drift and records.max_change checks passed: {NO_PREVIOUS}")
        return out


def run_checks(job: JobConfig, staging: str, manifest: dict[str, Any]) -> Gate:
    """Evaluate `job.checks` on the dataset staged in `staging` (its manifest `manifest`)."""
    assert job.checks is not None
    report, samples = staged_stats(staging, job.output)
    base = baseline(job)  # a damaged previous output is no baseline (etl.quality.stats)
    previous, before = base.output, base.stats
    if before is not None:
        report["drift"] = compare(report, before, previous or "")
    results = evaluate(job.checks, report, manifest, before, previous)
    return Gate(results, previous, report, samples, base.note)


def checks_doc(gate: Gate, run_id: str, span: str | None) -> dict[str, Any]:
    """checks.json: every failed and warned check, then all results."""
    return {"checks_format": CHECKS_FORMAT, "run_id": run_id, "span": span,
            "compared_with": gate.previous,
            "checks": [r.to_json() for r in gate.blocked + gate.warned],
            "all": [r.to_json() for r in gate.results]}


def page(gate: Gate) -> str:
    """The report of the staged data with a section of the failed checks on top."""
    body = render({**gate.report, "generator": "tfrecord-etl quality gate"}, gate.samples)
    rows = "".join(
        f"<tr><td>{html.escape(r.level)}</td><td>{html.escape(r.check)}</td>"
        f"<td>{html.escape(r.split or '')}</td><td>{html.escape(_shown(r.measured))}</td>"
        f"<td>{html.escape(_shown(r.threshold))}</td></tr>"
        for r in gate.blocked + gate.warned)
    section = ("<section id=\"failed-checks\"><h1>Failed quality checks</h1>"
               "<table><tr><th>level</th><th>check</th><th>split</th><th>measured</th>"
               f"<th>threshold</th></tr>{rows}</table></section>")
    return body.replace("<body>", "<body>" + section, 1)


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return "" if value is None else fmt(value)


def block(job: JobConfig, staging: str, gate: Gate, run_id: str, run_key: str,
          job_sha256: str | None = None) -> BlockedError:
    """Quarantine the staged dataset and say so: the error the run raises (exit 6)."""
    replaces = published_run(job.output)
    files = {quarantine.CHECKS: json.dumps(checks_doc(gate, run_id, job.span), indent=1,
                                           default=_json_default).encode(),
             quarantine.PAGE: page(gate).encode()}
    with signals.deferred():  # an entry whole (its marker complete) or cut short and marked
        where = quarantine.put(staging, job.output, run_id, run_key, files, replaces, job.span,
                               job_sha256)
    # a signal while it was put there: nothing was published (not critical()'s "after publishing")
    signals.raise_pending(f"{signals.UNCHANGED} (the run is quarantined in {where})")
    return blocked_error(job, where, [r.to_json() for r in gate.blocked + gate.warned],
                         [r.line() for r in gate.blocked])


def blocked_error(job: JobConfig, where: str, checks: list[dict[str, Any]], lines: list[str],
                  again: str = "") -> BlockedError:
    span = f"span {job.span}" if job.span else job.output
    unchanged = ("the previous output is unchanged" if published_run(job.output)
                 else "nothing is published there")
    head = (f"{span} blocked by {len(lines)} quality check(s){again}: nothing published "
            f"({unchanged}); the run is quarantined in {where} (checks.json, report.html); "
            f"publish it with `run_pipeline.py quarantine release {job.output}` or "
            f"`run --accept`, or remove it with `quarantine drop {job.output}`")
    return BlockedError("\n".join([head, *(f"  {line}" for line in lines)]), checks)


def still_blocked(job: JobConfig, run_key: str) -> BlockedError | None:
    """The BlockedError of a rerun whose run (same run key) is already in quarantine."""
    try:
        entry = quarantine.find(job.output, run_key=run_key)
    except OSError:
        return None
    if entry is None:
        return None
    failed = [c for c in entry.checks if c.get("level") == "block" and not c.get("passed")]
    lines = [Result(**{k: c.get(k) for k in Result.__dataclass_fields__}).line() for c in failed]
    return blocked_error(job, entry.path, failed, lines,
                         again=f" (run {entry.run_id}, same inputs, job and schema: still "
                               "blocked, not run again)")


def warn(gate: Gate) -> None:
    """Each failed `warn:` check as a warning line; the span publishes."""
    for r in gate.warned:
        log.warning("%s", r.line())


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, float):
        return repr(o)
    raise TypeError(f"not JSON: {type(o).__name__}")


def apply(job: JobConfig, staging: str, manifest: dict[str, Any], run_id: str,
          accept: bool = False) -> Gate:
    """The run's gate before it publishes: warn lines for failed `warn:` checks; for failed
    `block:` checks the staged dataset goes to quarantine and BlockedError is raised, unless
    `accept` (`run --accept`): then they are printed as accepted and the span publishes."""
    with native_stderr_quiet():  # the statistics decode with TensorFlow: its start-up lines
        gate = run_checks(job, staging, manifest)
    warn(gate)
    for line in gate.lines()[len(gate.blocked) + len(gate.warned):]:
        log.warning("%s", line)
    if gate.blocked and not accept:
        raise block(job, staging, gate, run_id, str(manifest.get("run_key") or ""),
                    manifest.get("job_sha256"))
    for r in gate.blocked:
        log.warning("accepted (--accept): %s", r.line())
    return gate


def accept_quarantined(job: JobConfig, run_key: str, stale_after: float,
                       break_lock: bool) -> dict[str, Any] | None:
    """`run --accept` of a span whose very run waits in quarantine: release it (no new run);
    the published manifest, or None when there is none to release."""
    entry = quarantine.find(job.output, run_key=run_key)
    if entry is None:
        return None
    with signals.deferred():  # the release and the entry's removal: one step
        line = quarantine.release(entry, stale_after, break_lock)
    log.warning("%s (--accept)", line)
    signals.raise_pending(f"after the release completed ({line})")
    return quarantine.manifest_of_output(job.output)
