"""Ship our package to remote workers without the user writing a requirements file.

Off the local runner, unless the user chose one of Beam's own ways to give workers code
(`--setup_file`, `--extra_package(s)`, `--requirements_file`, `--sdk_container_image` /
`--worker_harness_container_image`), the launcher adds:

- `--extra_package=<our wheel>`: built from pyproject.toml (a source tree) or repacked from
  the installed distribution. A pure-Python wheel, so workers install it without building
  anything (an sdist via `--setup_file` would be built again on every worker, and its build
  backend fetched from PyPI there). Beam installs it with `pip install --force-reinstall
  --no-deps`, then once more with its dependencies, which the pins below already satisfy.
- `--requirements_file=<pins>` and `--requirements_cache=skip`: `name==version` of every
  dependency the wheel declares (plus protobuf, which TensorFlow, tfx-bsl and TFMD are
  compiled against), at the launcher's installed versions. `skip` keeps Beam from running
  `pip download` at launch (no network while staging); workers install the pins before our
  wheel, from PyPI, and skip those their container already has at that version.

The wheel and pins live in a content-addressed directory below the temp dir (`tfrecord-etl-
<uid>/staging/<sha256>`): files must outlive the pipeline's submission, a rerun of the same
code reuses them, and two launchers building at once each rename a finished build into place.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as md
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import uuid
import zipfile
from dataclasses import dataclass

from apache_beam.options.pipeline_options import (
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)
from packaging.requirements import Requirement

from etl.base.errors import ConfigError
from etl.base.runners import is_local, runner_class_name
from etl.storage import fs

log = logging.getLogger(__name__)

DIST_NAME = "tfrecord-etl"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# not declared by us, but TensorFlow, tfx-bsl and TFMD are compiled against it: pin it too
ALSO_PINNED = ("protobuf",)
# declared for the launcher's own build step only; workers install no build backend
NOT_PINNED = frozenset({"setuptools"})
# top-level files a build reads besides the package directories (py-modules: *.py)
BUILD_FILES = re.compile(r"^(pyproject\.toml|setup\.py|setup\.cfg|MANIFEST\.in|README.*|LICEN[CS]E.*|"
                         r"NOTICE.*|[A-Za-z_][A-Za-z0-9_]*\.py)$")
# fixed wheel timestamps: the same sources give a byte-identical wheel
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest a zip file can hold
KEEP_BUILDS = 8


@dataclass(frozen=True)
class Staging:
    """Options added for workers (empty: none) and the one line saying so."""

    args: tuple[str, ...]
    note: str


def pipeline_options(args: list[str]) -> PipelineOptions:
    """`PipelineOptions(args)` plus the options that ship our package to remote workers;
    logs one line saying what is staged (nothing for the local runner)."""
    options = PipelineOptions(args)
    staging = worker_staging(options)
    if staging.note:
        log.warning("%s", staging.note)
    return PipelineOptions(list(args) + list(staging.args)) if staging.args else options


def worker_staging(options: PipelineOptions, cache_root: str | None = None) -> Staging:
    """What to add to `options` so remote workers can import our code at our versions."""
    runner = runner_name(options)
    if is_local(runner):  # its workers share this machine's environment: nothing to stage
        return Staging((), "")
    chosen = user_staging(options)
    if chosen:
        return Staging((), f"staging for {runner} workers: left to your {', '.join(chosen)} "
                           f"(nothing added)")
    wheel = build_artifact(cache_root)
    requirements = write_pins(wheel)
    args = [f"--extra_package={wheel}", f"--requirements_file={requirements}"]
    if options.view_as(SetupOptions).requirements_cache is None:
        args.append("--requirements_cache=skip")
    n = len(read_pins(requirements))
    return Staging(tuple(args), f"staging for {runner} workers: {os.path.basename(wheel)} "
                                f"(--extra_package) and {n} dependency pins at this "
                                f"environment's versions (--requirements_file {requirements})")


def runner_name(options: PipelineOptions) -> str:
    """The runner's class name (`--runner` may be a dotted path; Beam's default: Direct)."""
    return runner_class_name(options.view_as(StandardOptions).runner)


def user_staging(options: PipelineOptions) -> list[str]:
    """Beam's own staging options the user set: any of them means the user decides."""
    setup = options.view_as(SetupOptions)
    worker = options.view_as(WorkerOptions)
    given = {"--setup_file": setup.setup_file, "--extra_packages": setup.extra_packages,
             "--requirements_file": setup.requirements_file,
             "--sdk_container_image": worker.sdk_container_image,
             "--worker_harness_container_image": worker.worker_harness_container_image}
    return [name for name, value in given.items() if value]


# --- the artifact ---------------------------------------------------------------------------

def source_tree() -> str | None:
    """The source tree this code runs from (its pyproject.toml names our distribution)."""
    path = os.path.join(ROOT, "pyproject.toml")
    if not os.path.isfile(path):
        return None
    text = fs.read_bytes(path).decode("utf-8")
    return ROOT if re.search(rf'^name\s*=\s*"{re.escape(DIST_NAME)}"', text, re.M) else None


def build_artifact(cache_root: str | None = None) -> str:
    """The wheel workers get: built from pyproject.toml when running from a source tree,
    else repacked from the installed distribution. Returns its local path."""
    root = source_tree()
    if root is not None:
        return build_wheel(root, cache_root)
    return repack_installed(cache_root)


def _cache_dir(cache_root: str | None) -> str:
    base = cache_root or os.path.join(tempfile.gettempdir(), f"tfrecord-etl-{os.getuid()}")
    return os.path.join(base, "staging")


def _build_inputs(root: str) -> list[str]:
    """Files a build of `root` reads, relative: the top-level build files and every top-level
    package directory (with __init__.py), without caches, hidden entries or build output."""
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isfile(path) and BUILD_FILES.match(name):
            out.append(name)
        elif os.path.isfile(os.path.join(path, "__init__.py")) and not name.startswith("."):
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames
                                     if d != "__pycache__" and not d.startswith("."))
                rel = os.path.relpath(dirpath, root)
                out.extend(os.path.join(rel, f) for f in sorted(filenames)
                           if not f.startswith(".") and not f.endswith((".pyc", ".pyo")))
    return out


def build_wheel(root: str, cache_root: str | None = None) -> str:
    """Build our wheel from `root` with the launcher's own setuptools (no build isolation, no
    network), in a copy of its build inputs: the user's tree gets no build/ or egg-info, and
    nothing stale from an old build/lib slips into the wheel."""
    inputs = _build_inputs(root)
    digest = hashlib.sha256(f"{sys.version}|{_version('setuptools')}".encode())
    for rel in inputs:
        data = fs.read_bytes(os.path.join(root, rel))
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)
    return _cached(cache_root, digest.hexdigest(), lambda work: _setuptools_wheel(root, inputs, work))


def _setuptools_wheel(root: str, inputs: list[str], work: str) -> None:
    src = os.path.join(work, "src")
    for rel in inputs:
        with fs.open_write(os.path.join(src, rel), durable=False) as fh:  # a scratch copy
            fh.write(fs.read_bytes(os.path.join(root, rel)))
    code = ("import sys\nfrom setuptools import build_meta\n"
            "print(build_meta.build_wheel(sys.argv[1]))\n")
    env = dict(os.environ, SOURCE_DATE_EPOCH=SOURCE_DATE_EPOCH, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", code, work], cwd=src, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise ConfigError(
            f"could not build {DIST_NAME} from {root}/pyproject.toml for the workers with this "
            f"environment's setuptools {_version('setuptools')} (needs >=77; "
            f"`pip install 'setuptools>=77'`), or pass --extra_package, --setup_file or "
            f"--sdk_container_image yourself: {tail}")
    fs.delete_tree(src)


def repack_installed(cache_root: str | None = None) -> str:
    """A wheel of the installed distribution (a regular, non-editable install): its files
    as RECORD lists them, with a fresh RECORD; no build step and no source tree needed."""
    try:
        dist = md.distribution(DIST_NAME)
    except md.PackageNotFoundError as e:
        raise ConfigError(f"{DIST_NAME} is neither a source tree nor installed here: pass "
                          f"--setup_file, --extra_package or --sdk_container_image") from e
    direct = dist.read_text("direct_url.json")
    if direct and json.loads(direct).get("dir_info", {}).get("editable"):
        raise ConfigError(f"{DIST_NAME} is an editable install whose source tree is gone: "
                          f"reinstall it, or pass --setup_file, --extra_package or "
                          f"--sdk_container_image")
    files = sorted(str(f) for f in dist.files or []
                   if not str(f).startswith("..") and "__pycache__" not in str(f)
                   and not str(f).endswith((".pyc", ".pyo")))
    info = next((f.split("/")[0] for f in files if f.endswith(".dist-info/METADATA")), None)
    if info is None:
        raise ConfigError(f"the installed {DIST_NAME} has no METADATA: reinstall it")
    skip = {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    members = [f for f in files if f not in skip]
    digest = hashlib.sha256(info.encode())
    for rel in members:
        data = fs.read_bytes(str(dist.locate_file(rel)))
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)

    def pack(work: str) -> None:
        name = f"{info.removesuffix('.dist-info')}-py3-none-any.whl"
        record = io.StringIO()
        writer = csv.writer(record, lineterminator="\n")
        with zipfile.ZipFile(os.path.join(work, name), "w", zipfile.ZIP_DEFLATED) as whl:
            for rel in members:
                data = fs.read_bytes(str(dist.locate_file(rel)))
                whl.writestr(zipfile.ZipInfo(rel, (1980, 1, 1, 0, 0, 0)), data,
                             zipfile.ZIP_DEFLATED)
                sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                writer.writerow([rel, f"sha256={sha.decode()}", len(data)])
            writer.writerow([f"{info}/RECORD", "", ""])
            whl.writestr(zipfile.ZipInfo(f"{info}/RECORD", (1980, 1, 1, 0, 0, 0)),
                         record.getvalue(), zipfile.ZIP_DEFLATED)

    return _cached(cache_root, digest.hexdigest(), pack)


def _cached(cache_root: str | None, key: str, build) -> str:
    """The one wheel in cache dir `key`, built by `build(work_dir)` if absent. A build goes
    to a private directory renamed into place whole, so a reader never sees half a build."""
    cache = _cache_dir(cache_root)
    final = os.path.join(cache, key)
    if not _one_wheel(final):
        work = os.path.join(cache, f".{key}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.makedirs(work)
        try:
            build(work)
            _one_wheel(work, required=True)
            try:
                fs.rename(work, final)
            except Exception:  # noqa: BLE001 - another launcher finished the same build first
                if not _one_wheel(final):
                    raise
        finally:
            if fs.exists(work):
                fs.delete_tree(work)
        _prune(cache, keep=final)
    return _one_wheel(final, required=True)


def _one_wheel(directory: str, required: bool = False) -> str:
    wheels = ([f for f in os.listdir(directory) if f.endswith(".whl")]
              if os.path.isdir(directory) else [])
    if len(wheels) == 1:
        return os.path.join(directory, wheels[0])
    if required:
        raise ConfigError(f"expected one wheel in {directory}, found {wheels}")
    return ""


def _prune(cache: str, keep: str) -> None:
    """Keep the newest KEEP_BUILDS builds (every entry here is a build of ours)."""
    builds = sorted((os.path.join(cache, d) for d in os.listdir(cache)
                     if re.fullmatch(r"[0-9a-f]{64}", d)), key=os.path.getmtime, reverse=True)
    for old in builds[KEEP_BUILDS:]:
        if old != keep:
            fs.delete_tree(old)


# --- the pins --------------------------------------------------------------------------------

def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def wheel_requirements(wheel: str) -> list[Requirement]:
    """The wheel's own Requires-Dist for a plain install (no extras; markers for here)."""
    with zipfile.ZipFile(wheel) as whl:
        meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        text = whl.read(meta).decode("utf-8")
    header = text.split("\n\n", 1)[0]
    reqs = [Requirement(line.split(":", 1)[1].strip()) for line in header.splitlines()
            if line.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def pins(wheel: str) -> list[str]:
    """`name[extras]==version` for every dependency of `wheel` (and ALSO_PINNED) at the
    version installed here: workers then run what the launcher built and tested with."""
    out: dict[str, str] = {}
    for req in wheel_requirements(wheel) + [Requirement(n) for n in ALSO_PINNED]:
        key = req.name.lower().replace("_", "-")
        if key in NOT_PINNED or key in out:
            continue
        version = _version(req.name)
        if version is None:
            raise ConfigError(f"{req.name} (a dependency of {DIST_NAME}) is not installed in "
                              f"this environment: install {DIST_NAME} with its dependencies")
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        out[key] = f"{req.name}{extras}=={version}"
    return [out[k] for k in sorted(out)]


def write_pins(wheel: str) -> str:
    """The pins as a requirements file beside the wheel, named by its content."""
    text = "".join(f"{p}\n" for p in pins(wheel))
    name = f"requirements-{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt"
    path = os.path.join(os.path.dirname(wheel), name)
    if not fs.exists(path):
        fs.write_bytes(path, text.encode())
    return path


def read_pins(path: str) -> list[str]:
    return [line.strip() for line in fs.read_bytes(path).decode().splitlines() if line.strip()]


def export(out_dir: str, cache_root: str | None = None) -> list[str]:
    """Copy the staged wheel and its pins (as requirements.txt) into `out_dir`: what the
    Dockerfile installs into a worker image. Refuses to replace files already there."""
    wheel = build_artifact(cache_root)
    pairs = [(wheel, os.path.join(out_dir, os.path.basename(wheel))),
             (write_pins(wheel), os.path.join(out_dir, "requirements.txt"))]
    stale = [dst for _, dst in pairs if fs.exists(dst)]
    if stale:
        raise ConfigError(f"{', '.join(stale)} already exist: remove them or pick another folder")
    for src, dst in pairs:
        fs.write_bytes(dst, fs.read_bytes(src))
    return [dst for _, dst in pairs]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m transforms.staging",
        description="Write the wheel Dataflow workers get and its dependency pins "
                    "(requirements.txt) into a folder, for the Dockerfile.")
    parser.add_argument("out_dir", nargs="?", default="dist")
    try:
        for written in export(parser.parse_args().out_dir):
            print(written)
    except ConfigError as e:
        sys.exit(f"error: {e}")
