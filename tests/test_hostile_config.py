"""Issue 28, point 7: job files, schema files, input names and inputs that are no files, as a
careless or hostile user may hand them over: each refused in one line naming the key or the
file (exit 2 for configuration), or converted as asked; never `unexpected XError`, never a hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipelines import write_yaml

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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_yaml_that_builds_objects_or_includes_files_is_refused(tmp_path: Path) -> None:
    """`!!python/object...` tags in a job or schema file, and `!include`-style tags (the
    loader has no include mechanism: a YAML SafeLoader, unknown tags refused), are refused in
    one line naming the file, line and column and the tag; nothing they name is run or read."""
    (tmp_path / "data.csv").write_text("id\n1\n")
    (tmp_path / "schema.yaml").write_text(ID_SCHEMA)
    tail = ("is refused: only plain YAML values are read (no Python objects, no !include of "
            "other files, no custom tags)")
    cases = {
        "job.yaml": ("schema: schema.yaml\nsources: {train: {format: csv, paths: [data.csv]}}\n"
                     "output: !!python/object/apply:os.system ['touch PWNED']\n",
                     "job.yaml", "line 3, column 9: the tag '!!python/object/apply:os.system'"),
        "include.yaml": ("schema: schema.yaml\nsources: !include /etc/passwd\noutput: out\n",
                         "include.yaml", "line 2, column 10: the tag '!include'"),
        "via-schema.yaml": ("schema: evil.yaml\nsources: {train: {format: csv, paths: "
                            "[data.csv]}}\noutput: out\n", "evil.yaml",
                            "line 4, column 7: the tag '!!python/object:os.system'"),
    }
    (tmp_path / "evil.yaml").write_text("name: t\nkind: example\nfeatures:\n"
                                        "  id: !!python/object:os.system {dtype: int64}\n")
    for name, (text, named, said) in cases.items():
        (tmp_path / name).write_text(text)
        for extra in (["--estimate"], []):
            code, err, _ = _cli(tmp_path, "run", name, "--runner=FnApiRunner", *extra)
            assert code == 2, (name, err)
            shown = name if named == name else tmp_path / named  # as given; the schema resolved
            assert err == [f"error: {shown}: not valid YAML: {said} {tail}"], err
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_outputs_that_would_replace_what_is_not_ours_are_refused(tmp_path: Path) -> None:
    """`output:` naming `/`, a home directory, `~...` (never expanded), `..`, `.`, the job's
    folder or a parent of it, the checkout of this program or a parent of it, an input's
    folder, or a name with a line break or tab: refused when the job is loaded (so by
    --estimate and --dry-run too), naming the job file and the key's line; `--output` the same,
    naming the option. Nothing is created."""
    from etl.base.errors import ConfigError  # noqa: PLC0415
    from etl.job.config import load_job  # noqa: PLC0415

    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "data" / "a.csv").write_text("id\n1\n")
    (proj / "schema.yaml").write_text(ID_SCHEMA)
    home = os.path.expanduser("~")
    tail = ("; the output directory is replaced as a whole, so give it a new directory of its "
            "own (e.g. out/NAME)")
    cases = [
        ("/", "'/': it is the filesystem root (/)" + tail),
        (home, f"{home!r}: it is your home directory ({home})" + tail),
        ("~/x", "'~/x': it starts with '~', which is not expanded to a home directory here (it "
                "would make a folder named '~'): write the full path"),
        ("..", f"'..' ({tmp_path}): it holds the job file's folder ({proj})" + tail),
        (".", f"'.' ({proj}): it is the job file's folder ({proj})" + tail),
        (str(proj), f"'{proj}': it is the job file's folder ({proj})" + tail),
        (str(ROOT), f"'{ROOT}': it is the checkout of this program ({ROOT})" + tail),
        (str(ROOT.parent), f"'{ROOT.parent}': it holds the checkout of this program ({ROOT})"
         + tail),
        ("data", f"'data' ({proj / 'data'}): it is the folder of the input sources.train.paths "
                 f"'data/*.csv' ({proj / 'data'})" + tail),
        ("out\nx", "'out\\nx': it holds a control character (a line break, tab, ...): such a "
                   "name breaks logs, listings and scripts; choose a plain name"),
        ("a\tb", "'a\\tb': it holds a control character (a line break, tab, ...): such a name "
                 "breaks logs, listings and scripts; choose a plain name"),
    ]
    for output, said in cases:
        job = write_yaml(str(proj / "job.yaml"), {
            "schema": "schema.yaml", "shards": 2, "output": output,
            "sources": {"train": {"format": "csv", "paths": ["data/*.csv"]}}})
        line = next(i for i, x in enumerate(Path(job).read_text().splitlines(), 1)
                    if x.startswith("output:"))
        try:
            load_job(job)
        except ConfigError as e:
            assert str(e) == f"{job}:{line}: refusing output {said}", (output, str(e))
        else:
            raise AssertionError(f"output {output!r} was accepted")
    ok = write_yaml(str(proj / "job.yaml"), {"schema": "schema.yaml", "output": "out",
                                             "sources": {"train": {"format": "csv",
                                                                   "paths": ["data/*.csv"]}}})
    assert load_job(ok).output == str(proj / "out")
    try:
        load_job(ok, output=str(proj))
    except ConfigError as e:
        assert str(e) == f"--output: refusing output '{proj}': it is the job file's folder ({proj})" + tail
    else:
        raise AssertionError("--output PROJ was accepted")
    (proj / "job.yaml").write_text("schema: schema.yaml\nsources: {train: {format: csv, paths: "
                                   "[data/a.csv]}}\n\noutput: ~\n")
    code, err, _ = _cli(proj, "run", "job.yaml", "--estimate", "--runner=FnApiRunner")
    assert code == 2 and err == ["error: job.yaml:4: output is empty (YAML reads "
                                 "a bare ~ or nothing as null, not as a home directory): write "
                                 "the full path"], err
    assert sorted(p.name for p in proj.iterdir()) == ["data", "job.yaml", "schema.yaml"]


@pytest.mark.slow
def test_input_names_with_shell_characters_convert_and_line_breaks_are_refused(
        tmp_path: Path) -> None:
    """Input files named with `$`, `;`, spaces, quotes, a literal `*`, `$(...)` or a leading
    dash are read like any other (nothing they say is run) and named exactly in the rejected
    records; a name with a line break is refused by name (it would split every one-line
    message naming it), exit 2."""
    import json  # noqa: PLC0415

    (tmp_path / "data").mkdir()
    names = ["sp ace.csv", "do$llar.csv", "se;mi.csv", "quo'te.csv", 'dq"uote.csv', "st*ar.csv",
             "$(touch PWNED).csv", "-dash.csv", "`touch PWNED2`.csv"]
    for n in names:
        (tmp_path / "data" / n).write_text("id\n1\nbad\n")
    job = _job(tmp_path, {"format": "csv", "paths": ["data/*.csv"]}, max_bad_fraction=0.9)
    code, err, _ = _cli(tmp_path, "run", str(job), "--runner=FnApiRunner")
    assert code == 0, err
    dead = [json.loads(x) for x in (tmp_path / "out" / "rejected" / "rejected.jsonl")
            .read_text().splitlines()]
    assert sorted((r["source"], r["line"]) for r in dead) == sorted(
        (str(tmp_path / "data" / n), 3) for n in names)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert sum(s["num_records"] for s in manifest["splits"].values()) == len(names)
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists()

    (tmp_path / "data" / "new\nline.csv").write_text("id\n1\n")
    code, err, _ = _cli(tmp_path, "run", str(job), "--runner=FnApiRunner", "--force")
    assert code == 2 and err == [
        f"error: {job}: sources.train: '{tmp_path}/data/new\\nline.csv' (from 'data/*.csv') has "
        "a control character (a line break, tab, ...) in its name, which would break the "
        "one-line messages and logs naming it: rename it"], err


def test_job_schema_and_vocabulary_files_that_never_end_are_refused(tmp_path: Path) -> None:
    """`schema: /dev/zero`, `vocabulary_file: /dev/zero` or `run /dev/zero` were read until
    the memory ran out; each is read to its limit (16 MiB of a job or schema file, 256 MiB of
    a vocabulary) and refused in one line naming it. A directory as a job file: one line."""
    from etl.base.errors import ConfigError, SchemaError  # noqa: PLC0415
    from etl.contract.schema import load_schema  # noqa: PLC0415
    from etl.job.config import load_job  # noqa: PLC0415

    def refused(error: type[Exception], fn, *args) -> str:
        try:
            fn(*args)
        except error as e:
            return str(e)
        raise AssertionError(f"{fn.__name__}{args} was accepted")

    assert refused(ConfigError, load_job, "/dev/zero") == (
        "cannot read job file '/dev/zero': it is longer than 67,108,864 characters, more than "
        "a job file may be")
    assert refused(SchemaError, load_schema, "/dev/zero") == (
        "cannot read schema file '/dev/zero': it is longer than 67,108,864 characters, more "
        "than a schema file may be")
    schema = tmp_path / "schema.yaml"
    schema.write_text("name: t\nkind: example\nfeatures:\n"
                      "  label: {dtype: bytes, vocabulary_file: /dev/zero}\n")
    assert refused(SchemaError, load_schema, str(schema)) == (
        f"{schema}: feature 'label': cannot read vocabulary_file '/dev/zero': it is longer than "
        "268,435,456 characters, more than a vocabulary_file may be")
    assert refused(ConfigError, load_job, str(tmp_path)) == (
        f"cannot read job file '{tmp_path}': [Errno 21] Is a directory: '{tmp_path}'")
