"""Quarantine: where a span blocked by a quality check (etl.quality) waits for a person.

    OUT.quarantine/RUN_ID/_QUARANTINE.json   our marker: producer, run id and key, the output
                                             it was blocked for, the run the span would have
                                             replaced, the names it holds, the sha256 of the
                                             dataset's manifest
    OUT.quarantine/RUN_ID/dataset/...        the staged dataset as the run left it (shards,
                                             index files, schema files, manifest.json)
    OUT.quarantine/RUN_ID/checks.json        every failed and warned check: name, feature,
                                             split, measured value, threshold
    OUT.quarantine/RUN_ID/report.html        the report, the failed checks on top

beside the output (gs://: `gs://B/path/OUT.quarantine/RUN_ID/...`), never inside the published
layout: a reader, `verify` and the next run's output check never see it.

What quarantine trusts (docs/quality.md): nothing in the marker says where to delete or where to
publish. An entry's place is derived from the command's own OUT and the layout
(`root(OUT)/RUN_ID`, RUN_ID a plain folder name); the output a release publishes into is that
OUT; the marker only confirms identity (its run id is the folder's, its names lie inside the
entry's layout, its manifest checksum is the dataset's). A marker that names something outside
`dataset/`, `checks.json`, `report.html`, or another run id, makes the entry refused, not
obeyed. Symlinks anywhere in an entry (or `OUT.quarantine` itself) are never followed: lstat
only, and the entry is refused in one line.

The marker is written first and lists every name the entry will hold, so a put cut short
leaves an entry `drop` can remove (and the next run, under the output's lock, removes it:
`remove_incomplete`); `drop` removes only names a marker of ours lists that lie inside the
entry (and, locally, the directories left empty). `complete` turns true after the last file.

`release` publishes an entry through the normal publish path, under the output's lock, only
after it verified the entry byte for byte (every file the dataset's manifest lists: size and
sha256; nothing unlisted; manifest and checks.json parse) and only if the output has not moved
on since the span was blocked (the published run is still the one the blocked run would have
replaced): locally the `dataset/` folder is renamed into place (etl.output.publish.publish:
same file system, the old output set aside in a run dir); on gs:// the objects are copied into
a new version and the pointer swung (etl.output.remote.RemoteRun.publish). An interrupted gs://
release leaves the pointer where it was (the copies are claimed in a run marker first and
removed by the next run) and the entry whole; one interrupted after the pointer moved left the
output published as that run, and a second `release` (or `list`) sees that the entry is
released.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

from etl.base import signals
from etl.base.errors import ConfigError, EtlError, StorageError, VerifyError, quote
from etl.base.pause import pause
from etl.output.layout import MANIFEST, PRODUCER, QUARANTINE_SUFFIX, SUCCESS
from etl.output.lock import DEFAULT_STALE_AFTER, RunInfo
from etl.output.manifest import dataset_dir, load_manifest
from etl.output.ownership import belongs
from etl.output.place import place_for
from etl.storage import fs
from etl.storage.object_store import Conflict, Store

log = logging.getLogger(__name__)
SUFFIX = QUARANTINE_SUFFIX
MARKER = "_QUARANTINE.json"
DATASET = "dataset"
CHECKS = "checks.json"
PAGE = "report.html"
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")  # a folder name we could have made
CHUNK = 1 << 20


def root(output: str) -> str:
    """`OUT.quarantine` beside OUT (local: absolute)."""
    return place_for(output).quarantine_root


def entry_path(output: str, run_id: str) -> str:
    return fs.join(root(output), run_id)


@dataclass
class Entry:
    """One quarantined run: where it is and for which output derived from the command's OUT
    and the layout; the rest as its marker says (identity, checked before it is used)."""

    path: str  # root(output)/run_id: derived, never read from the marker
    run_id: str  # the folder's name (the marker's run id must be the same)
    run_key: str
    output: str  # the command's OUT: where a release publishes
    replaces: str | None  # run id of the output published when the span was blocked
    created: str
    objects: list[str]  # names inside the entry (checked: `_inside`)
    complete: bool
    span: str | None = None
    job_sha256: str | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)
    generation: int = 0  # gs://: the marker's generation
    marker_output: str = ""  # the output the marker says the run was blocked for
    manifest_sha256: str | None = None  # the dataset's manifest.json as quarantined
    problem: str | None = None  # why the entry is refused (drop and release), one line

    def to_json(self) -> dict[str, Any]:
        return {"producer": PRODUCER, "run_id": self.run_id, "run_key": self.run_key,
                "output": self.marker_output or self.output, "span": self.span,
                "job_sha256": self.job_sha256, "replaces": self.replaces,
                "created": self.created, "objects": self.objects, "complete": self.complete,
                "manifest_sha256": self.manifest_sha256}


def put(staging: str, output: str, run_id: str, run_key: str, files: dict[str, bytes],
        replaces: str | None, span: str | None = None, job_sha256: str | None = None) -> str:
    """Move (local: rename) or copy (gs://) the staged dataset into a new entry, with `files`
    (checks.json, report.html) beside it; the marker first, `complete` last. Returns its path."""
    path = entry_path(output, run_id)
    names = sorted(_listing(staging))
    try:
        digest = hashlib.sha256(fs.read_bytes(fs.join(staging, MANIFEST))).hexdigest()
    except OSError:
        digest = None
    entry = Entry(path, run_id, run_key, output, replaces,
                  dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  [f"{DATASET}/{n}" for n in names] + sorted(files), False, span, job_sha256,
                  marker_output=output, manifest_sha256=digest)
    if not fs.renames(path):  # an object store: copied
        store = Store()
        entry.generation = store.write(fs.join(path, MARKER), _marker_bytes(entry), 0)
        for i, name in enumerate(names):
            store.copy_new(fs.join(staging, name), fs.join(path, DATASET, name))
            if i == 0:
                pause("quarantine:copy")
        for name, data in files.items():
            store.write(fs.join(path, name), data, 0)
        entry.complete = True
        store.write(fs.join(path, MARKER), _marker_bytes(entry), entry.generation)
        return path
    link = first_link(root(output)) if os.path.lexists(root(output)) else None
    if link is not None:  # a run writes through no link either (G19), not only drop/release
        raise StorageError(f"cannot quarantine run {run_id}: {link} is a symbolic link: "
                           "quarantine never follows one; remove the link, then run again")
    try:
        os.makedirs(path)
    except FileExistsError as e:
        raise StorageError(f"cannot quarantine run {run_id}: {path} exists already") from e
    except OSError as e:
        raise StorageError(f"cannot create {path}: {e.strerror or e}") from e
    fs.write_bytes(os.path.join(path, MARKER), _marker_bytes(entry))
    pause("quarantine:copy")
    os.replace(staging, os.path.join(path, DATASET))  # same file system: beside the output
    for name, data in files.items():
        fs.write_bytes(os.path.join(path, name), data)
    entry.complete = True
    fs.write_bytes(os.path.join(path, MARKER), _marker_bytes(entry))
    return path


def _listing(folder: str) -> list[str]:
    base = folder.rstrip("/").rstrip(os.sep)
    return [p[len(base) + 1:] for p, _ in fs.list_dir(folder)]


def _marker_bytes(entry: Entry) -> bytes:
    return json.dumps(entry.to_json(), indent=1).encode()


# ---- reading entries: derived from OUT, the marker only confirms ---------------------------
def entries(output: str) -> list[Entry]:
    """The quarantined runs of `output`, oldest first; folders without our marker are left
    out (and alone). An entry that cannot be trusted (symlinks, an edited marker) is listed
    with its `problem`. VerifyError when `OUT.quarantine` itself is a symbolic link."""
    top = root(output)
    found: list[Entry] = []
    if fs.local_path(top) is None:  # an object store: listed by prefix
        store = Store()
        prefix = top.rstrip("/") + "/"
        for obj in store.list(prefix):
            name, _, rest = obj.url[len(prefix):].partition("/")
            if rest == MARKER and RUN_ID.fullmatch(name):
                entry = _load_remote(prefix + name, name, output, store)
                if entry is not None:
                    found.append(entry)
    else:
        if os.path.islink(top):
            raise VerifyError(f"{top} is a symbolic link: quarantine never follows one; look "
                              "at what it points to and remove the link by hand")
        if os.path.isdir(top):
            for name in sorted(os.listdir(top)):
                entry = _load_local(os.path.join(top, name), name, output)
                if entry is not None:
                    found.append(entry)
    return sorted(found, key=lambda e: e.run_id)


def find(output: str, run_id: str | None = None, run_key: str | None = None) -> Entry | None:
    """The newest complete, trusted entry of `run_id` (or holding `run_key`); None if none."""
    for entry in reversed(entries(output)):
        if entry.complete and entry.problem is None and (
                run_id is None or entry.run_id == run_id) and (
                run_key is None or entry.run_key == run_key):
            return entry
    return None


def _refused(path: str, name: str, output: str, why: str) -> Entry:
    return Entry(path, name, "", output, None, "", [], False,
                 problem=f"refusing quarantined run {name} ({path}): {why}; look at it and "
                         "remove it by hand")


def _load_local(path: str, name: str, output: str) -> Entry | None:
    if not RUN_ID.fullmatch(name):
        return None
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return _refused(path, name, output, "it is a symbolic link, never followed")
        if not stat.S_ISDIR(st.st_mode):
            return None
        marker = os.path.join(path, MARKER)
        mst = os.lstat(marker)
    except FileNotFoundError:
        return None
    except OSError as e:
        return _refused(path, name, output, f"cannot read it: {e.strerror or e}")
    if stat.S_ISLNK(mst.st_mode):
        return _refused(path, name, output, f"{MARKER} is a symbolic link, never followed")
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(1 << 24)
    except OSError as e:
        return _refused(path, name, output, f"cannot read {MARKER}: {e.strerror or e}")
    entry = _from_marker(raw, path, name, output, 0)
    if entry is not None and entry.problem is None:
        link = first_link(path)
        if link is not None:
            entry.problem = _refused(path, name, output, f"{link} is a symbolic link, never "
                                     "followed").problem
    if entry is not None and entry.complete and entry.problem is None:
        entry.checks = _checks(fs.join(path, CHECKS))
    return entry


def _load_remote(path: str, name: str, output: str, store: Store) -> Entry | None:
    try:
        found = store.read(fs.join(path, MARKER))
    except OSError:
        return None
    if found is None:
        return None
    raw, generation = found
    entry = _from_marker(raw, path, name, output, generation)
    if entry is not None and entry.complete and entry.problem is None:
        entry.checks = _checks(fs.join(path, CHECKS))
    return entry


def _from_marker(raw: bytes, path: str, name: str, output: str, generation: int,
                 ) -> Entry | None:
    """The entry at `path` (folder `name`) as its marker `raw` describes it: None when it is
    not a marker of ours; with `problem` set when it is ours but disagrees with the layout."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("producer") != PRODUCER:
        return None
    try:
        run_id, run_key, said = doc["run_id"], doc["run_key"], doc["output"]
        objects, replaces = doc["objects"], doc.get("replaces")
        if not (isinstance(run_id, str) and isinstance(run_key, str) and isinstance(said, str)
                and isinstance(objects, list) and (replaces is None or isinstance(replaces, str))):
            raise TypeError("a field of the wrong type")
    except (KeyError, TypeError) as e:
        return _refused(path, name, output, f"its {MARKER} is damaged ({quote(str(e), 80)})")
    span, job, digest = doc.get("span"), doc.get("job_sha256"), doc.get("manifest_sha256")
    entry = Entry(path, name, run_key, output, replaces, str(doc.get("created")),
                  [], doc.get("complete") is True,
                  span if isinstance(span, str) else None, job if isinstance(job, str) else None,
                  generation=generation, marker_output=said,
                  manifest_sha256=digest if isinstance(digest, str) else None)
    if run_id != name:
        entry.problem = _refused(path, name, output, f"its {MARKER} names run "
                                 f"{quote(run_id, 80)}, not the folder's").problem
        return entry
    for obj in objects:
        if not _inside(obj):
            entry.problem = _refused(path, name, output, f"its {MARKER} lists "
                                     f"{quote(obj)}, not a name inside a quarantine entry "
                                     "(edited by hand?)").problem
            return entry
    entry.objects = list(objects)
    return entry


def _inside(name: Any) -> bool:
    """`name` is a relative path a quarantine entry of ours holds: `dataset/...`, checks.json
    or report.html; no `..`, `.`, empty part, absolute path, backslash or NUL."""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        return False
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    return name in (CHECKS, PAGE) or (parts[0] == DATASET and len(parts) > 1)


def first_link(path: str) -> str | None:
    """The first symbolic link at or below `path` (lstat: none is followed), or None."""
    if os.path.islink(path):
        return path
    for folder, dirs, files in os.walk(path, followlinks=False):
        for n in sorted(dirs + files):
            if os.path.islink(os.path.join(folder, n)):
                return os.path.join(folder, n)
    return None


def _checks(path: str) -> list[dict[str, Any]]:
    try:
        found = json.loads(fs.read_bytes(path))["checks"]
        return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _trusted(entry: Entry) -> None:
    if entry.problem is not None:
        raise VerifyError(entry.problem)
    if fs.local_path(entry.path) is not None:  # only a file system has links
        link = first_link(entry.path)
        if link is not None:
            raise VerifyError(_refused(entry.path, entry.run_id, entry.output,
                                       f"{link} is a symbolic link, never followed").problem or "")


# ---- drop ---------------------------------------------------------------------------------
def drop(entry: Entry, stale_after: float = DEFAULT_STALE_AFTER,
         break_lock: bool = False) -> list[str]:
    """Under the output's lock (a release or a run in progress: refused, exit 4), remove what
    `entry`'s marker lists inside the entry, then the marker (and, locally, the folders left
    empty). Anything else stays. Returns the paths removed."""
    _trusted(entry)
    info = RunInfo.current(entry.run_id)
    with place_for(entry.output).hold(info, stale_after, break_lock):
        return _remove(entry)


def _remove(entry: Entry) -> list[str]:
    """Delete the entry's listed names (checked to lie inside it), then its marker. The caller
    holds the output's lock."""
    _trusted(entry)
    removed = []
    names = [n for n in entry.objects if _inside(n)]
    if fs.local_path(entry.path) is None:  # an object store: each listed object
        store = Store()
        for name in names:
            url = fs.join(entry.path, name)
            if store.delete(url):
                removed.append(url)
        try:
            store.delete(fs.join(entry.path, MARKER), if_generation_match=entry.generation or None)
        except Conflict as e:
            raise StorageError(f"{entry.path}: its marker changed while it was dropped") from e
        return removed
    marker = os.path.join(entry.path, MARKER)
    for path in [os.path.join(entry.path, n) for n in names] + [marker]:
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.remove(path)
                if path != marker:
                    removed.append(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise StorageError(f"cannot remove {path}: {e.strerror or e}; the quarantine of "
                               f"run {entry.run_id} is partly removed, drop it again") from e
    folders = {os.path.dirname(os.path.join(entry.path, n)) for n in names}
    for folder in sorted(folders | {entry.path}, key=len, reverse=True):
        _remove_empty(folder, stop=root(entry.output))
    _remove_empty(root(entry.output), stop=os.path.dirname(root(entry.output)))
    return removed


def _remove_empty(folder: str, stop: str) -> None:
    """rmdir `folder` and its empty parents strictly below `stop` (never through a link)."""
    below = stop.rstrip(os.sep) + os.sep
    while folder.startswith(below) and not os.path.islink(folder):
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)


def remove_incomplete(output: str) -> list[str]:
    """The next run's recovery, under the output's lock: entries a run killed while putting
    them there left incomplete (their marker lists what may exist) are removed; trusted ones
    only. Returns the entries removed."""
    gone = []
    try:
        found = entries(output)
    except (EtlError, OSError):
        return gone
    for entry in found:
        if not entry.complete and entry.problem is None:
            try:
                _remove(entry)
            except (EtlError, OSError) as e:
                log.warning("could not remove the incomplete quarantine %s: %s", entry.path, e)
                continue
            log.warning("removed the incomplete quarantine of run %s (%s): its run stopped "
                        "while putting it there", entry.run_id, entry.path)
            gone.append(entry.path)
    return gone


# ---- release ------------------------------------------------------------------------------
def release(entry: Entry, stale_after: float = DEFAULT_STALE_AFTER,
            break_lock: bool = False) -> str:
    """Publish `entry` as the command's output (its run id, its manifest), under the output's
    lock, after verifying it byte for byte, if the output still publishes what the blocked run
    would have replaced; then remove the entry. Returns what happened, in one line.
    ConfigError (exit 2) when the output moved on or is not the one the entry belongs to;
    VerifyError (exit 3) when the entry is damaged or cannot be trusted."""
    _trusted(entry)
    if not entry.complete:
        raise ConfigError(f"{entry.path}: its quarantine is incomplete (the run stopped while "
                          "putting it there); drop it and rerun the span")
    output = entry.output
    info = RunInfo.current(entry.run_id)
    with place_for(output).hold(info, stale_after, break_lock) as held:
        held.clear_leftovers(None)
        _trusted(entry)  # again, locked
        now = held.published_run()
        if now == entry.run_id:
            _remove(entry)
            return f"{output} already publishes run {entry.run_id}: removed its quarantine"
        _not_moved_on(entry, now)
        _consistent(entry, verify_entry(entry))
        held.release(fs.join(entry.path, DATASET))
        _remove(entry)
    return f"released run {entry.run_id}: {output} publishes it now{_moved(entry)}"


def _moved(entry: Entry) -> str:
    if not entry.marker_output or fs.same_path(entry.marker_output, entry.output):
        return ""
    return f" (it was blocked for {entry.marker_output}: this tree was moved or copied)"


def _not_moved_on(entry: Entry, now: str | None) -> None:
    if now != entry.replaces:
        was = f"run {entry.replaces}" if entry.replaces else "nothing"
        raise ConfigError(f"refusing to release run {entry.run_id}: {entry.output} has moved on "
                          f"since it was blocked (it published {was} then, run {now or 'nothing'}"
                          " now), so releasing it would replace newer data; drop it "
                          f"(quarantine drop {entry.output} --run {entry.run_id}) or rerun the "
                          "span")


def _consistent(entry: Entry, manifest: dict[str, Any]) -> None:
    """The entry belongs to the command's output: when its marker names another output (a
    moved or copied tree, an edited marker), OUT must publish the same job and span as the
    quarantined dataset (its run was checked to be the one the entry replaces); an OUT that
    publishes nothing proves nothing, and is refused."""
    if not entry.marker_output or fs.same_path(entry.marker_output, entry.output):
        return
    now = published_manifest(entry.output)  # None: nothing proves the two are one output
    if now is None or now.get("span") != manifest.get("span") or (
            now.get("published_by") != manifest.get("published_by")):
        raise ConfigError(f"refusing to release run {entry.run_id}: its marker says it was "
                          f"blocked for {entry.marker_output}, not {entry.output}, and "
                          f"{entry.output} does not publish the same job and span; release it "
                          f"from {entry.marker_output}, or drop it")


def published_manifest(output: str) -> dict[str, Any] | None:
    ddir = dataset_dir(output)
    if not fs.exists(fs.join(ddir, SUCCESS)):
        return None
    try:
        doc = load_manifest(ddir)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def verify_entry(entry: Entry) -> dict[str, Any]:
    """The quarantined dataset checked byte for byte against its manifest (every listed file
    present with its size and sha256, nothing unlisted), its identity against the marker
    (run id, run key, span, job sha256, the manifest's sha256) and checks.json parsed. Returns the
    manifest; VerifyError (exit 3) naming the file otherwise."""
    ddir = fs.join(entry.path, DATASET)
    where = f"refusing to release run {entry.run_id}"
    mpath = fs.join(ddir, MANIFEST)
    try:
        raw = fs.read_bytes(mpath)
        manifest = json.loads(raw)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
            raise ValueError("not a manifest of ours")
        listed = _listed(manifest)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise VerifyError(f"{where}: cannot read {mpath}: {fs.first_line(e)}; drop it and "
                          "rerun the span") from e
    if entry.manifest_sha256 and hashlib.sha256(raw).hexdigest() != entry.manifest_sha256:
        raise VerifyError(f"{where}: {mpath} changed since the run was blocked; drop it and "
                          "rerun the span")
    for key, want in (("run_id", entry.run_id), ("run_key", entry.run_key),
                      ("span", entry.span), ("job_sha256", entry.job_sha256)):
        got = manifest.get(key)
        if want and got != want:
            raise VerifyError(f"{where}: {mpath} says {key} {quote(got, 80)}, its marker "
                              f"{quote(want, 80)}; drop it and rerun the span")
    base = ddir.rstrip("/") + "/"
    sizes = {p[len(base):]: size for p, size in fs.list_dir(ddir)}
    for name, (size, digest) in sorted(listed.items()):
        signals.raise_pending(signals.UNCHANGED)
        path = fs.join(ddir, name)
        if name not in sizes:
            raise VerifyError(f"{where}: {path} is missing (listed in its manifest); drop it "
                              "and rerun the span")
        if sizes[name] != size:
            raise VerifyError(f"{where}: {path} changed since the run was blocked "
                              f"({sizes[name]} bytes, its manifest says {size}); drop it and "
                              "rerun the span")
        if _sha256(path) != digest:
            raise VerifyError(f"{where}: {path} changed since the run was blocked (its "
                              "sha256 is not its manifest's); drop it and rerun the span")
    extra = sorted(n for n in sizes if n != MANIFEST and n not in listed
                   and not belongs(manifest, ddir, n))
    if extra:
        raise VerifyError(f"{where}: {fs.join(ddir, extra[0])} is not in its manifest; drop it "
                          "and rerun the span")
    try:
        doc = json.loads(fs.read_bytes(fs.join(entry.path, CHECKS)))
        if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list):
            raise ValueError("no list of checks")
    except (OSError, ValueError) as e:
        raise VerifyError(f"{where}: cannot read {fs.join(entry.path, CHECKS)}: "
                          f"{fs.first_line(e)}; drop it and rerun the span") from e
    return manifest


def _listed(manifest: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Every file the manifest lists with its size and sha256 (files, shards, index files)."""
    out = {name: (int(e["num_bytes"]), str(e["sha256"]))
           for name, e in manifest.get("files", {}).items()}
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            out[shard["path"]] = (int(shard["num_bytes"]), str(shard["sha256"]))
            index = shard.get("index")
            if index is not None:
                out[index["path"]] = (int(index["num_bytes"]), str(index["sha256"]))
    for name in out:
        if not isinstance(name, str) or not _inside(f"{DATASET}/{name}"):
            raise ValueError(f"it lists {quote(name)}, not a file inside the dataset")
    return out


def _sha256(path: str) -> str:
    sha = hashlib.sha256()
    with fs.open_read(path) as fh:
        while chunk := fh.read(CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def manifest_of(entry: Entry) -> dict[str, Any]:
    """The quarantined dataset's manifest."""
    try:
        return json.loads(fs.read_bytes(fs.join(entry.path, DATASET, MANIFEST)))
    except (OSError, ValueError) as e:
        raise EtlError(f"{entry.path}: cannot read its {MANIFEST}: {fs.first_line(e)}") from e


def manifest_of_output(output: str) -> dict[str, Any]:
    """The manifest `output` publishes now."""
    return load_manifest(dataset_dir(output))
