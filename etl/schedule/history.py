"""Run history: one JSON entry per run (ok, skipped, failed), beside the outputs.

    {root}/_runs.jsonl               local: one line per run, appended
    {root}/_runs/{run_id}.json      gs://: one object per run (objects cannot be appended)

`root` is the output's parent directory (history_root): for span outputs such as
out/daily/2026-11-21 that is out/daily, so one history holds every span of a job.

Concurrent runs write safely: locally each entry is one write() of a whole line to a file
opened O_APPEND, under an exclusive flock (O_APPEND alone keeps lines whole on a local disk;
the lock also covers file systems where it does not, and short writes). A run killed in the
middle of that write leaves a last line without its newline: the next append starts with one,
so only the torn line is lost, and `read` skips it (and says how many it skipped). On gs://
each run creates its own object, only if absent (if_generation_match=0), so no two runs ever
write the same object, and an object is there whole or not at all; `read` lists and merges
them (one request per entry, made concurrently).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from etl.base.errors import bounded
from etl.output.place import place_for
from etl.storage import fs
from etl.storage.object_store import Conflict, Store

log = logging.getLogger(__name__)
RUNS_FILE = "_runs.jsonl"
RUNS_DIR = "_runs"
FIELDS = ("run_id", "run_key", "span", "start", "end", "status", "skipped_reason", "exit_code",
          "error", "counts", "output", "runner", "dataflow_job_id", "rebuilt_reason",
          "checks", "accepted")
READ_THREADS = 16
ERROR_LIMIT = 1000  # characters of an entry's error


def history_root(output: str) -> str:
    """The output's parent directory (local: absolute), where its history lives."""
    return place_for(output).history_root


def iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="milliseconds")


def entry(**fields: Any) -> dict[str, Any]:
    """An entry with every field, in FIELDS order (absent ones None)."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown history field(s) {sorted(unknown)}")
    return {k: fields.get(k) for k in FIELDS}


def exists(root: str) -> bool:
    """Whether a history is there already."""
    return _log(root).exists()


def exists_on_disk(root: str) -> bool:
    """Whether a history on this machine's disk is there already; a store is never asked
    (False): what a run that knows nothing of its output yet may look at."""
    return _log(root).exists_on_disk()


def append(root: str, item: dict[str, Any]) -> str:
    """Add one entry; returns where it went. An `error` longer than ERROR_LIMIT characters is
    cut to that (messages quote user data through `etl.base.errors.quote`; this is a safety net)."""
    if isinstance(item.get("error"), str) and len(item["error"]) > ERROR_LIMIT:
        item = {**item, "error": bounded(item["error"], ERROR_LIMIT)}
    line = json.dumps(item, sort_keys=False, default=str, separators=(",", ":")) + "\n"
    if "\n" in line[:-1]:
        raise ValueError("a history entry must be one line")
    return _log(root).append(item, line.encode())


class _FileLog:
    """A local history: one file, appended a whole line at a time under flock."""

    def __init__(self, root: str):
        self.root = root
        self.where = os.path.join(root, RUNS_FILE)

    def exists(self) -> bool:
        return os.path.exists(self.where)

    exists_on_disk = exists

    def append(self, item: dict[str, Any], data: bytes) -> str:
        os.makedirs(self.root, exist_ok=True)
        path = self.where
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                # a run killed mid-write left a line without its newline: start on a fresh line,
                # or this entry would be glued onto the torn one and lost with it
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        return path

    def read_lines(self) -> list[bytes]:
        return fs.read_bytes(self.where).splitlines() if self.exists() else []


class _ObjectLog:
    """A history in an object store: one object per entry (objects cannot be appended)."""

    def __init__(self, root: str):
        self.root = root
        self.where = root.rstrip("/") + "/" + RUNS_DIR + "/"

    def exists(self) -> bool:
        return bool(Store().list(self.where))

    def exists_on_disk(self) -> bool:
        return False  # not on this machine's disk: the store is not asked

    def append(self, item: dict[str, Any], data: bytes) -> str:
        # run ids begin with their UTC start: names list in time order
        name = str(item.get("run_id") or "") or str(item.get("start") or "unknown").replace(":", "")
        url = self.where + name.replace("/", "_") + ".json"
        store = Store()
        for n in range(5):  # a name taken already (the same run id twice): another name, never over
            try:
                store.write(url if n == 0 else url[:-5] + f"-{n}.json", data, if_generation_match=0)
                return url if n == 0 else url[:-5] + f"-{n}.json"
            except Conflict:
                continue
        raise FileExistsError(url)

    def read_lines(self) -> list[bytes]:
        store = Store()
        objects = [o.url for o in store.list(self.where) if o.url.endswith(".json")]
        if not objects:
            return []
        with ThreadPoolExecutor(min(READ_THREADS, len(objects))) as pool:
            found = list(pool.map(store.read, objects))
        return [f[0] for f in found if f is not None]


def _log(root: str) -> _FileLog | _ObjectLog:
    """The history at `root`: a file on this machine's disk, or objects in a store."""
    return _ObjectLog(root) if fs.local_path(root) is None else _FileLog(root)


def read(root: str) -> list[dict[str, Any]]:
    """Every entry, oldest first (by start, then run id). Lines that are not JSON objects (a
    run killed mid-write, a write cut short by a full disk) are skipped with a warning naming
    their count; `read_counted` returns that count."""
    entries, damaged = read_counted(root)
    if damaged:
        log.warning("%s: %s", _where(root), damaged_note(damaged))
    return entries


def read_counted(root: str) -> tuple[list[dict[str, Any]], int]:
    """(every entry oldest first, as `read`; how many damaged lines or objects were skipped)."""
    raw = _log(root).read_lines()
    entries = []
    damaged = 0
    for line in raw:
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            damaged += 1
            continue
        if isinstance(item, dict):
            entries.append(item)
        else:
            damaged += 1
    entries.sort(key=lambda e: (str(e.get("start") or ""), str(e.get("run_id") or "")))
    return entries, damaged


def damaged_note(count: int) -> str:
    """`1 damaged line skipped`, `3 damaged lines skipped`."""
    return f"{count} damaged line{'' if count == 1 else 's'} skipped"


def _where(root: str) -> str:
    return _log(root).where


def seconds(item: dict[str, Any]) -> float | None:
    try:
        start = dt.datetime.fromisoformat(str(item["start"]))
        end = dt.datetime.fromisoformat(str(item["end"]))
    except (KeyError, TypeError, ValueError):
        return None
    return (end - start).total_seconds()


def _short(text: Any, width: int = 70) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def format_table(entries: list[dict[str, Any]]) -> str:
    """The entries as a fixed-width table (one row each, oldest first as given); the last
    column holds the skipped reason or the error, shortened."""
    header = ("span", "status", "written", "rejected", "seconds", "run id", "output", "note")
    rows = []
    for e in entries:
        counts = e.get("counts") or {}
        secs = seconds(e)
        status = str(e.get("status") or "")
        if status == "failed" and e.get("exit_code") is not None:
            status = f"failed({e['exit_code']})"
        if e.get("accepted"):
            status += "(accepted)"
        checks = [c for c in e.get("checks") or [] if isinstance(c, dict)]
        note = e.get("skipped_reason") or e.get("error") or e.get("rebuilt_reason") or ""
        if checks:  # blocked or warned: the checks that failed, by name
            note = "checks: " + ", ".join(sorted({str(c.get("check")) for c in checks}))
        rows.append((
            str(e.get("span") or "-"), status,
            "-" if counts.get("written") is None else f"{counts['written']:,}",
            "-" if counts.get("rejected") is None else f"{counts['rejected']:,}",
            "-" if secs is None else f"{secs:.1f}",
            str(e.get("run_id") or ""), str(e.get("output") or ""),
            _short(note),
        ))
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    right = {2, 3, 4}

    def fmt(row: tuple[str, ...]) -> str:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        return "  ".join(cells).rstrip()

    return "\n".join([fmt(header)] + [fmt(r) for r in rows])
