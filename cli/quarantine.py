"""`quarantine list|release|drop OUT`: what waits in quarantine beside an output, publish it,
or remove it (etl.output.quarantine). A release and a drop are recorded in the run history
beside the output (status `released` / `dropped`).

The entries are found from OUT alone (`OUT.quarantine/RUN_ID/`); a marker's paths are never
used (docs/quality.md, "What quarantine trusts"). A release or drop and its history entry are
one step a signal cannot split: a SIGINT/SIGTERM that lands while they run is held until both
are done (the publish itself still backs out of a signal before `_SUCCESS`), then the command
exits 130/143 saying what was done."""

from __future__ import annotations

import argparse
import time

from etl.base import signals
from etl.base.errors import ConfigError, VerifyError
from etl.output import quarantine
from etl.output.manifest import published_run
from etl.quality.evaluate import Result
from etl.schedule import history


def command(args: argparse.Namespace) -> int:
    output = args.output
    found = quarantine.entries(output)
    if args.action == "list":
        _list(output, found)
        return 0
    if args.run is not None:
        chosen = [e for e in found if e.run_id == args.run]
        if not chosen:
            raise ConfigError(f"no quarantined run {args.run} for {output} "
                              f"(`quarantine list {output}` shows them)")
    elif args.all and args.action == "drop":
        chosen = found
    elif len(found) > 1:
        raise ConfigError(f"{len(found)} quarantined runs for {output}: name one with --run "
                          f"RUN_ID ({', '.join(e.run_id for e in found)})")
    else:
        chosen = found
    if not chosen:
        raise ConfigError(f"nothing in quarantine for {output}")
    for entry in chosen:
        if entry.problem is not None:  # before any lock or change: one line, exit 3
            raise VerifyError(entry.problem)
    for entry in chosen:
        _act(args.action, entry)
    return 0


def _act(action: str, entry: quarantine.Entry) -> None:
    """Release or drop `entry` and record it, as one step (module docstring)."""
    started = time.time()
    status = "released" if action == "release" else "dropped"
    with signals.deferred():
        if action == "release":
            line = quarantine.release(entry)
        else:
            removed = quarantine.drop(entry)
            line = f"dropped run {entry.run_id}: removed {entry.path} ({len(removed)} file(s))"
        print(line, flush=True)
        signum = signals.pending()
        _record(entry, status, started, 0 if signum is None else 128 + signum)
    signals.raise_pending(f"after the {action} completed ({line}; recorded in the history)")


def _list(output: str, found: list[quarantine.Entry]) -> None:
    if not found:
        print(f"nothing in quarantine for {output}")
    published = published_run(output) if found else None
    for e in found:
        if e.problem is not None:
            print(f"{e.run_id}  {e.problem}")
            continue
        if e.run_id == published:  # a release stopped after publishing: it is released
            print(f"{e.run_id}  span {e.span or '-'}  released: {output} publishes it "
                  f"(`quarantine drop {output} --run {e.run_id}` removes what is left)")
            continue
        state = "" if e.complete else " (incomplete: drop it)"
        print(f"{e.run_id}  span {e.span or '-'}  blocked {e.created}  {e.path}{state}")
        for c in e.checks:
            print(f"  {_line(c)}")


def _line(check: dict) -> str:
    return Result(**{k: check.get(k) for k in Result.__dataclass_fields__}).line()


def _record(entry: quarantine.Entry, status: str, started: float, exit_code: int = 0) -> None:
    try:
        history.append(history.history_root(entry.output), history.entry(
            run_id=entry.run_id, run_key=entry.run_key, span=entry.span,
            start=history.iso(started), end=history.iso(time.time()), status=status,
            exit_code=exit_code, output=entry.output, checks=entry.checks or None))
    except OSError as e:  # the history is a record, not a reason to fail
        print(f"warning: could not add to the run history: {e}")
