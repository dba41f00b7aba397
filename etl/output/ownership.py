"""What in an output directory is ours: the files its manifest lists, the report files
`report` wrote beside them (their marker inside), and nothing else. `verify`, the next run's
output guard and the skip rule all ask here, so they agree on what "intact and ours" means.
"""

from __future__ import annotations

import json
import os
from typing import Any

from etl.output.layout import MANIFEST, META_FILES, PRODUCER, REJECTED_DIR, REPORT_FILES, SUCCESS
from etl.storage import fs

REPORT_GENERATOR = f"{PRODUCER} report"
# what each report file carries in its first bytes (etl.tools.report writes them there)
_REPORT_MARKS = {"report.json": f'"generator": "{REPORT_GENERATOR}"'.encode(),
                 "report.html": f'<meta name="generator" content="{REPORT_GENERATOR}">'.encode()}
REPORT_HEAD = 512


def listed_files(manifest: dict[str, Any]) -> set[str]:
    """Every path (relative to the output) a manifest accounts for, itself and the marker
    included, each shard's index file too (manifests before index files list none).
    Format 1 manifests did not list rejected/: any file there counts as listed."""
    listed = set(META_FILES) | set(manifest.get("files", {}))
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            listed.add(shard["path"])
            if shard.get("index") is not None:
                listed.add(shard["index"]["path"])
    return listed


def is_listed(manifest: dict[str, Any], relative: str) -> bool:
    if relative in listed_files(manifest):
        return True
    return manifest.get("format_version") == 1 and relative.startswith(REJECTED_DIR + "/")


def belongs(manifest: dict[str, Any], directory: str, relative: str) -> bool:
    """`relative`, a file in the output `directory`, is part of it: listed in its manifest, or
    a report file `report` wrote there (its marker inside). What verify and the next run's
    output check both accept."""
    return is_listed(manifest, relative) or (
        relative in REPORT_FILES and report_is_ours(fs.join(directory, relative)))


def report_is_ours(path: str) -> bool:
    """`path` is a report.json / report.html written by `report` (its marker in the first
    REPORT_HEAD bytes); False for another name, another file, or an unreadable one."""
    mark = _REPORT_MARKS.get(fs.basename(path))
    if mark is None:
        return False
    try:
        with fs.open_read(path) as fh:
            return mark in fh.read(REPORT_HEAD)
    except OSError:
        return False


def foreign_content(path: str) -> str | None:
    """Why the existing directory `path` is not provably a previous output of ours, or None
    (ours, or empty). The report files `report` writes beside the data are ours when they
    carry its marker (etl.output.ownership.report_is_ours)."""
    found = entries(path)
    if not found:
        return None
    manifest = load_json(os.path.join(path, MANIFEST))
    if not isinstance(manifest, dict) or not isinstance(manifest.get("format_version"), int):
        return (f"it is not empty ({len(found)} entries, e.g. {found[0]}) and holds no "
                f"{MANIFEST} of a dataset written by {PRODUCER}")
    if not ours(manifest, SUCCESS in found):
        return f"its {MANIFEST} is not one written by {PRODUCER}"
    try:
        extra = [f for f in found if not belongs(manifest, path, f)]
    except (KeyError, TypeError, AttributeError):
        return f"its {MANIFEST} does not list its shards"
    if extra:
        more = f" and {len(extra) - 1} more" if len(extra) > 1 else ""
        return f"it holds {extra[0]}{more}, which its {MANIFEST} does not list"
    return None


def ours(manifest: Any, has_success: bool) -> bool:
    """Written by us: our producer tag, or a format 1 manifest (before the tag) with its
    `_SUCCESS` marker."""
    return isinstance(manifest, dict) and isinstance(manifest.get("format_version"), int) and (
        manifest.get("producer") == PRODUCER
        or (manifest.get("format_version") == 1 and has_success))


def entries(path: str) -> list[str]:
    """Every entry below `path` (files, links, and directories that hold no file), relative,
    sorted. Directories count too: an empty user folder inside is not ours either."""
    out = []
    for root, dirs, files in os.walk(path):
        rel = os.path.relpath(root, path)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            out.append(os.path.normpath(os.path.join(rel, name)))
        if rel != "." and not files and not dirs:
            out.append(rel + "/")
    return sorted(p.replace(os.sep, "/") for p in out)


def load_json(path: str) -> Any:
    try:
        return json.loads(fs.read_bytes(path))
    except (OSError, ValueError):
        return None
