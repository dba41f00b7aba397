"""Issue 28, point 7: job files, schema files, input names and inputs that are no files, as a
careless or hostile user may hand them over: each refused in one line naming the key or the
file (exit 2 for configuration), or converted as asked; never `unexpected XError`, never a hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.test_pipeline import write_yaml

ROOT = Path(__file__).resolve().parent.parent
ID_SCHEMA = "name: t\nkind: example\nfeatures:\n  id: {dtype: int64, shape: []}\n"


def _cli(cwd: Path, *args: str, env: dict[str, str] | None = None,
         timeout: float = 120) -> tuple[int, list[str], str]:
    """`run_pipeline.py ARGS`: exit code, stderr's lines (Beam's WARNING lines left out), stdout."""
    proc = subprocess.run([sys.executable, str(ROOT / "run_pipeline.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})})
    lines = [x for x in proc.stderr.splitlines() if x.strip() and not x.startswith("WARNING")]
    return proc.returncode, lines, proc.stdout


def _job(d: Path, source: dict, **extra: object) -> Path:
    (d / "schema.yaml").write_text(ID_SCHEMA)
    return Path(write_yaml(str(d / "job.yaml"), {"schema": "schema.yaml", "output": "out",
                                                 "shards": 2, "sources": {"train": source},
                                                 **extra}))


def test_estimate_runs_no_user_code(tmp_path: Path) -> None:
    """`--estimate` of a `format: python` source called the user's function to sample it,
    although it launches nothing; now it says the source is not sampled and runs nothing."""
    (tmp_path / "usergen.py").write_text(
        "import pathlib\n\ndef gen():\n    pathlib.Path('CALLED').write_text('ran')\n"
        "    for i in range(10):\n        yield {'id': i}\n")
    job = _job(tmp_path, {"format": "python", "function": "usergen:gen"})
    code, err, out = _cli(tmp_path, "run", str(job), "--estimate", "--runner=FnApiRunner",
                          env={"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"})
    assert code == 0 and err == [], err
    assert ("  not sampled       source train (python): its function is your code, which an "
            "estimate never runs; its records are not counted below") in out.splitlines(), out
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")
    assert left == ["job.yaml", "schema.yaml", "usergen.py"]  # no CALLED, no output


def test_fifo_and_directory_inputs_are_refused_by_name(tmp_path: Path) -> None:
    """A FIFO input hung `--estimate` (and the run) for good; a directory named `x.csv` gave
    `unexpected IsADirectoryError`. Both are refused at listing, by name, exit 2, whether
    named or matched by a glob."""
    os.mkfifo(tmp_path / "in.csv")
    (tmp_path / "d.csv").mkdir()
    (tmp_path / "a.csv").write_text("id\n1\n")
    cases = [("in.csv", "in.csv", "a FIFO (named pipe)"), ("*.csv", "in.csv", "a FIFO (named pipe)"),
             ("d.csv", "d.csv", "a directory")]
    for pattern, name, kind in cases:
        job = _job(tmp_path, {"format": "csv", "paths": [pattern]})
        for extra in (["--estimate"], []):
            code, err, _ = _cli(tmp_path, "run", str(job), "--runner=FnApiRunner", *extra,
                                timeout=60)
            assert code == 2, (pattern, extra, err)
            assert err == [f"error: {job}: sources.train: '{tmp_path / name}' (from "
                           f"'{pattern}') is {kind}, not a file: inputs must be regular files; "
                           "move it away or narrow the pattern"], (pattern, extra, err)
        assert not (tmp_path / "out").exists()
