"""The worker's view: only what staging ships, installed into a fresh virtual environment
outside the source tree, must run a job and give the same shards as the source tree.

Catches a module or package data file missing from the wheel (a lazily imported source
reader, a shuffle strategy...), which every test run from the source tree would miss. The
fresh venv gets our wheel alone (`--no-deps`, no network); its dependencies come from this
venv's site-packages through a plain path in a .pth file, so this venv's editable hook for
our package (itself a .pth there) is never run and `import etl` can only find the wheel's copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from tests.helpers import IDS_SCHEMA, ROOT, cli
from transforms import staging

DATAFLOW = ["--runner=DataflowRunner", "--project=my-project-123", "--region=us-central1",
            "--temp_location=gs://my-bucket/tmp"]
ROWS = 300


def make_job(folder: str) -> str:
    """CSV (train) and npy (test) inputs, one schema: two lazily imported source readers."""
    os.makedirs(os.path.join(folder, "data"))
    with open(os.path.join(folder, "schema.yaml"), "w") as fh:
        fh.write(IDS_SCHEMA)
    with open(os.path.join(folder, "data", "ids.csv"), "w") as fh:
        fh.write("id,a,b\n" + "".join(f"{i},{i * 0.5},{-i}\n" for i in range(ROWS)))
    ids = np.arange(ROWS, 2 * ROWS, dtype=np.int64)
    np.save(os.path.join(folder, "data", "id.npy"), ids)
    np.save(os.path.join(folder, "data", "a.npy"), (ids * 0.25).astype(np.float32))
    np.save(os.path.join(folder, "data", "b.npy"), (-ids).astype(np.float32))
    job = {"schema": "schema.yaml", "shards": 3, "shuffle": {"seed": 11},
           "sources": {"train": {"format": "csv", "paths": ["data/ids.csv"]},
                       "test": {"format": "npy",
                                "paths": {"id": "data/id.npy", "a": "data/a.npy",
                                          "b": "data/b.npy"}}},
           "output": "out"}
    path = os.path.join(folder, "job.yaml")
    with open(path, "w") as fh:
        json.dump(job, fh)
    return path


def fresh_venv(where: str, wheel: str) -> tuple[str, dict[str, str]]:
    """A venv with `wheel` installed (no dependencies) and this venv's site-packages on its
    path; returns its python and the environment to run it in."""
    venv.create(where, with_pip=False, symlinks=True)
    python = os.path.join(where, "bin", "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps",
                    "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--quiet",
                    wheel], check=True, capture_output=True, text=True, timeout=120)
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True,
                             text=True).stdout.strip()
    with open(os.path.join(purelib, "zz_launcher_deps.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")  # a path line: its .pth files don't run
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONNOUSERSITE="1", TF_CPP_MIN_LOG_LEVEL="2", VIRTUAL_ENV=where,
               PATH=os.path.join(where, "bin") + os.pathsep + env.get("PATH", ""))
    return python, env


def shard_hashes(out: str) -> dict[str, str]:
    with open(os.path.join(out, "manifest.json")) as fh:
        manifest = json.load(fh)
    return {s["path"]: s["sha256"] for split in manifest["splits"].values()
            for s in split["shards"]}


@pytest.fixture(scope="module")
def staged_wheel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Exactly the wheel a Dataflow launch would upload (transforms.staging)."""
    result = staging.worker_staging(PipelineOptions(DATAFLOW),
                                    cache_root=str(tmp_path_factory.mktemp("cache")))
    return next(a.split("=", 1)[1] for a in result.args if a.startswith("--extra_package="))


@pytest.fixture(scope="module")
def fresh(staged_wheel: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    return fresh_venv(str(tmp_path_factory.mktemp("fresh") / "venv"), staged_wheel)


@pytest.mark.slow
def test_the_staged_wheel_alone_runs_a_job_outside_the_source_tree(fresh, tmp_path) -> None:
    python, env = fresh
    venv_dir = os.path.dirname(os.path.dirname(python))
    work = str(tmp_path / "elsewhere")
    job = make_job(work)
    where = subprocess.run(
        [python, "-c", textwrap.dedent("""\
            import json, sys, etl, etl.shuffle, transforms, run_pipeline, apache_beam
            print(json.dumps([m.__file__ for m in (etl, etl.shuffle, transforms, run_pipeline)]
                             + [apache_beam.__file__, sys.prefix]))""")],
        cwd=work, env=env, capture_output=True, text=True, check=True)
    *ours, beam_at, prefix = json.loads(where.stdout)
    assert prefix == venv_dir
    for path in ours:  # our code from the wheel, never from the source tree
        assert path.startswith(venv_dir + os.sep), path
    assert beam_at.startswith(sysconfig.get_paths()["purelib"])  # deps from this venv

    # the console script, as installed from the wheel; then the module form for verify
    run = subprocess.run([os.path.join(venv_dir, "bin", "tfrecord-etl"), "run", job,
                          "--output", "out", "--runner=FnApiRunner"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    verify = subprocess.run([python, "-m", "run_pipeline", "verify", "out"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout == f"OK out: {2 * ROWS} records train={ROWS}, test={ROWS}\n"

    # the same job from the source tree: identical shards
    source_out = str(tmp_path / "from-source")
    ran = cli("run", job, "--output", source_out, "--runner=FnApiRunner")
    assert ran.returncode == 0, ran.stderr
    fresh = shard_hashes(os.path.join(work, "out"))
    assert fresh == shard_hashes(source_out)
    assert len(fresh) == 6


def test_the_staged_wheel_holds_every_module_of_the_source_tree(staged_wheel) -> None:
    """What the fresh venv imports is the whole tree: no module left out of the wheel."""
    with zipfile.ZipFile(staged_wheel) as whl:
        names = set(whl.namelist())
    for package in ("etl", "transforms", "cli", "benchmarks"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, package)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in filenames:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT).replace(os.sep, "/")
                    assert rel in names, f"{rel} is not in {os.path.basename(staged_wheel)}"


@pytest.mark.slow
def test_an_installed_copy_stages_the_same_files(fresh, staged_wheel, tmp_path) -> None:
    """A launcher without a source tree (e.g. a Flex Template image) repacks the installed
    distribution: same files, same bytes as the wheel built from pyproject.toml."""
    python, env = fresh
    code = ("import sys; from transforms import staging; "
            "print(staging.source_tree(), staging.build_artifact(sys.argv[1]))")
    out = subprocess.run([python, "-c", code, str(tmp_path / "cache")], cwd=str(tmp_path),
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "None"
    assert os.path.basename(out[1]) == os.path.basename(staged_wheel)
    with zipfile.ZipFile(out[1]) as repacked, zipfile.ZipFile(staged_wheel) as built:
        record = next(n for n in built.namelist() if n.endswith(".dist-info/RECORD"))
        assert sorted(repacked.namelist()) == sorted(built.namelist())
        for name in built.namelist():
            if name != record:
                assert repacked.read(name) == built.read(name), name
        assert sorted(repacked.read(record).decode().splitlines()) \
            == sorted(built.read(record).decode().splitlines())
