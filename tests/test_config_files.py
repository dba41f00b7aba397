"""Config files (job YAML, schema YAML) a user hands us are refused in one line naming the file,
the 1-based line and the reason, in bounded memory (issue 20, case 10): a "billion laughs" of
nested aliases, duplicate keys, a tab in the indentation, an oversized file. Anchors and aliases
used as intended (a reused block, a merge key) still load and run."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from etl.base import yaml_load
from etl.base.errors import ConfigError, SchemaError
from etl.base.yaml_load import load_yaml
from etl.contract.schema import load_schema
from tests.helpers import IDS_SCHEMA as SCHEMA
from tests.helpers import RUN, cli

ROWS = "id,a,b\n" + "".join(f"{i},{i},{i}\n" for i in range(50))
EXPANDS = ("the document expands to more than 1,000,000 values through its aliases "
           "(&anchor/*alias); refusing it")

# Nine levels of nine aliases: 9**9 (387 million) scalars once expanded, 10 lines as written.
# Under `description:` (a key the job accepts) it got past validation and then into json.dumps:
# 3.3 GB and an empty MemoryError before this loader.
LEVELS = list(zip("abcdefgh", "bcdefghi", strict=True))  # (p, c): level c holds 9 x *p
LAUGHS = "description:\n  a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"  {c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in LEVELS)

# Runs the CLI with at most 2 GB of address space and writes the child's peak RSS (KiB) to
# argv[1]: getrusage(RUSAGE_CHILDREN) of a fresh process sees only that child.
PROBE = textwrap.dedent("""\
    import resource, subprocess, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    code = subprocess.call(sys.argv[2:])
    with open(sys.argv[1], "w") as f:
        f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
    sys.exit(code)
    """)


def lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def project(tmp_path, job: str, schema: str = SCHEMA) -> str:
    (tmp_path / "s.yaml").write_text(schema)
    (tmp_path / "d.csv").write_text(ROWS)
    (tmp_path / "job.yaml").write_text(job)
    return str(tmp_path / "job.yaml")


@pytest.mark.slow
def test_billion_laughs_job_is_one_line_in_bounded_memory(tmp_path) -> None:
    job = project(tmp_path, LAUGHS + "schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\n"
                                     "output: out\n")
    rss = tmp_path / "rss"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", PROBE, str(rss), sys.executable, RUN, "run", job],
                          capture_output=True, text=True, timeout=180)
    # line 8 is `g`, the first node past a million values (9**7 scalars)
    assert (proc.returncode, lines(proc.stderr)) == (2, [f"error: {job}:8: {EXPANDS}"]), proc.stderr
    assert int(rss.read_text()) < 500 * 1024, f"peak RSS {int(rss.read_text()) // 1024} MiB"
    assert time.monotonic() - started < 60
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text,line,reason", [
    # the shape: the anchors at the top level, the refusal at `g` all the same
    ("a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in LEVELS),
     7, EXPANDS),
    # mappings expand too, keys and values: past a million one level earlier, at `f`
    ("a: &a {k1: x, k2: x, k3: x, k4: x, k5: x, k6: x, k7: x, k8: x, k9: x}\n" + "".join(
        f"{c}: &{c} {{{', '.join(f'k{i}: *{p}' for i in range(1, 10))}}}\n"
        for p, c in LEVELS), 6, EXPANDS),
    ("schema: s.yaml\npaths: &p [a.csv, *p]\n", 2,
     "an alias (*alias) lies inside its own anchor (&anchor), so the document never ends; "
     "refusing it"),
])
def test_alias_bombs_and_loops_are_refused_before_any_object_is_built(text, line, reason) -> None:
    with pytest.raises(ConfigError) as e:
        load_yaml(text, "jobs/j.yaml", "job file")
    assert str(e.value) == f"jobs/j.yaml:{line}: {reason}"
    assert e.value.exit_code == 2


@pytest.mark.slow
def test_duplicate_key_in_a_job_names_both_lines(tmp_path) -> None:
    job = project(tmp_path, textwrap.dedent("""\
        schema: s.yaml
        source: {format: csv, paths: [d.csv]}
        output: out
        shards: 2
        shuffle:
          seed: 7
        shards: 4
        """))
    proc = cli("run", job)
    assert (proc.returncode, lines(proc.stderr)) == (
        2, [f"error: {job}:7: duplicate key 'shards' (first at line 4)"]), proc.stderr
    # nested, and keys equal as values though written differently (YAML 1.1: yes == true)
    with pytest.raises(ConfigError, match=re.escape(
            "j.yaml:4: duplicate key 'seed' (first at line 2)")):
        load_yaml("shuffle:\n  seed: 1\n  via: engine\n  seed: 2\n", "j.yaml", "job file")
    with pytest.raises(ConfigError, match=re.escape("j.yaml:2: duplicate key 'true' (first at "
                                                    "line 1)")):
        load_yaml("yes: 1\ntrue: 2\n", "j.yaml", "job file")


@pytest.mark.slow
def test_duplicate_feature_in_a_schema_names_both_lines(tmp_path) -> None:
    schema = SCHEMA + "  id: {dtype: float32, shape: []}\n"  # line 6 again declares `id` (line 4)
    job = project(tmp_path, "schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\noutput: out\n",
                  schema)
    proc = cli("run", job)
    path = tmp_path / "s.yaml"
    assert (proc.returncode, lines(proc.stderr)) == (
        2, [f"error: {path}:6: duplicate key 'id' (first at line 4)"]), proc.stderr
    with pytest.raises(SchemaError) as e:
        load_schema(path)
    assert str(e.value) == f"{path}:6: duplicate key 'id' (first at line 4)"


@pytest.mark.slow
def test_tab_indented_schema_is_one_line(tmp_path) -> None:
    path = tmp_path / "schema.yaml"
    path.write_text("kind: example\nfeatures:\n\tid: {dtype: int64, shape: []}\n")
    message = (f"{path}: not valid YAML: line 3, column 1: found a tab character where "
               "indentation is expected (YAML indents with spaces)")
    with pytest.raises(SchemaError) as e:
        load_schema(path)
    assert str(e.value) == message and e.value.exit_code == 2
    proc = cli("spec", str(path))
    assert (proc.returncode, lines(proc.stderr)) == (2, [f"error: {message}"]), proc.stderr


@pytest.mark.parametrize("text,message", [
    ("kind: example\nfeatures: [unclosed\n", "line 3, column 1: did not find expected ',' or ']' "
     "(while parsing a flow sequence that starts at line 2)"),
    ("kind: example\nname: @x\n", "line 2, column 7: found character '@' that cannot start any "
     "token (while scanning for the next token)"),
    ("kind: example\nname: *nowhere\n", "line 2, column 7: found undefined alias 'nowhere'"),
    ("kind: example\nname: 2020-13-45\n",  # a plain date is read as a timestamp
     "line 2, column 7: cannot read '2020-13-45' as timestamp: month must be in 1..12"),
])
def test_other_yaml_errors_are_one_line_with_line_and_column(text, message) -> None:
    if yaml_load._BASE is not getattr(yaml, "CSafeLoader", None) and "did not find" in message:
        pytest.skip("PyYAML without libyaml words this error differently")
    with pytest.raises(SchemaError) as e:
        load_yaml(text, "s.yaml", "schema file", SchemaError)
    assert str(e.value) == f"s.yaml: not valid YAML: {message}"


@pytest.mark.slow
def test_oversized_job_file_is_refused_before_parsing(tmp_path) -> None:
    job = project(tmp_path, "schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\noutput: out\n"
                  "description: " + "x" * (17 * 2**20) + "\n")
    proc = cli("run", job)
    assert (proc.returncode, lines(proc.stderr)) == (2, [
        f"error: {job}: the job file is 17.0 MiB, more than the 16 MiB a job file may be; "
        "refusing it"]), proc.stderr[:500]


def test_a_10000_feature_schema_is_well_within_the_bound(tmp_path) -> None:
    path = tmp_path / "wide.yaml"
    path.write_text("name: wide\nkind: example\nfeatures:\n" + "".join(
        f"  feature_{i:05d}:\n    dtype: float32\n    shape: []\n    source: column_{i:05d}\n"
        f"    default: 0.0\n    description: sensor {i} of the array, calibrated in 2024\n"
        for i in range(10_000)) + "  label:\n    dtype: int64\n    shape: []\n    vocabulary: ["
        + ", ".join(f"class_{i}" for i in range(1000)) + "]\n")
    assert path.stat().st_size < yaml_load.MAX_BYTES / 8  # about 1.5 MB
    started = time.monotonic()
    assert len(load_schema(path).context) == 10_001
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_anchors_and_merge_keys_used_as_intended_still_run(tmp_path) -> None:
    job = project(tmp_path, textwrap.dedent("""\
        schema: s.yaml
        sources:
          train: &csv {format: csv, paths: [d.csv]}
          test:
            <<: *csv
            paths: [e.csv]
        output: out
        shards: 2
        """))
    (tmp_path / "e.csv").write_text(ROWS.split("30,")[0])  # rows 0..29
    proc = cli("run", job)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"train +50 records in 2 shard", proc.stdout), proc.stdout
    assert re.search(r"test +30 records in 2 shard", proc.stdout), proc.stdout
    # a value reached through an alias is validated like any other, naming the key
    job = project(tmp_path, "schema: s.yaml\nsource: {format: csv, paths: [d.csv]}\n"
                            "output: out2\ndescription: &n two\nshards: *n\n")
    proc = cli("run", job)
    assert (proc.returncode, lines(proc.stderr)) == (
        2, [f"error: {job}: shards must be a positive integer, got 'two'"]), proc.stderr
