"""`quarantine list|release|drop OUT`: what waits in quarantine beside an output, publish it,
or remove it (etl.output.quarantine). A release and a drop are recorded in the run history
beside the output (status `released` / `dropped`)."""

from __future__ import annotations

import argparse
import time

from etl.base.errors import ConfigError
from etl.output import quarantine
from etl.quality.evaluate import Result
from etl.schedule import history


def command(args: argparse.Namespace) -> int:
    output = args.output
    found = quarantine.entries(output)
    if args.action == "list":
        if not found:
            print(f"nothing in quarantine for {output}")
        for e in found:
            state = "" if e.complete else " (incomplete: drop it)"
            print(f"{e.run_id}  span {e.span or '-'}  blocked {e.created}  {e.path}{state}")
            for c in e.checks:
                print(f"  {_line(c)}")
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
        started = time.time()
        if args.action == "release":
            print(quarantine.release(entry))
        else:
            removed = quarantine.drop(entry)
            print(f"dropped run {entry.run_id}: removed {entry.path} ({len(removed)} file(s))")
        _record(entry, "released" if args.action == "release" else "dropped", started)
    return 0


def _line(check: dict) -> str:
    return Result(**{k: check.get(k) for k in Result.__dataclass_fields__}).line()


def _record(entry: quarantine.Entry, status: str, started: float) -> None:
    try:
        history.append(history.history_root(entry.output), history.entry(
            run_id=entry.run_id, run_key=entry.run_key, span=entry.span,
            start=history.iso(started), end=history.iso(time.time()), status=status,
            exit_code=0, output=entry.output, checks=entry.checks or None))
    except OSError as e:  # the history is a record, not a reason to fail
        print(f"warning: could not add to the run history: {e}")
