"""Every command README.md and docs/*.md show is checked here, and their links resolve.

Commands are taken from fenced blocks (```sh, ```cron and the untagged synopsis block) and from
inline code in the prose that starts like a command (`make test`, `run JOB --estimate`, ...).
Each one gets at least one of:

- run for real (`RUNS`): the cheap, offline ones, in a scratch folder holding copies of
  `examples/` and `schemas/` (so outputs land there, not in the checkout), with placeholders
  such as `JOB.yaml` or `data/train.csv` replaced by bundled files (each replacement is listed);
- `run_pipeline.py` commands: the subcommand exists and every `--flag` shown is one of its
  options (read from `run_pipeline.py SUB --help`) or, for `run`/`demo`, a Beam pipeline
  option; a value shown for a flag with choices is one of them;
- `python -m MODULE` commands: the module exists and every flag shown is in its `--help`;
- `make` commands: the target is in the Makefile (its ARGS checked as the command they run);
- repository files a command names exist; the cron block is the shipped cron file;
- what cannot be checked here at all (cloud, Docker, root) is listed in `UNCHECKED` with the
  reason, and a command that matches nothing fails the test.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import make_run_recipe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "run_pipeline.py")
DOCS = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
LINKED = [*DOCS, os.path.join(ROOT, "benchmarks", "README.md")]  # pages whose links must resolve
SUBCOMMANDS = ("run", "demo", "history", "verify", "spec", "inspect", "infer-schema", "report",
               "quarantine")
COMMAND_BLOCKS = ("sh", "bash", "shell", "console", "cron", "")  # "" is the synopsis block
INLINE_START = re.compile(r"(python3? |\.venv/bin/python |run_pipeline\.py |make |pip |gcloud |"
                          r"docker |systemctl |(?:" + "|".join(SUBCOMMANDS) + r") )")
REPO_PATH = re.compile(r"(?<![\w/.$-])((?:examples|schemas|templates|benchmarks|etl|transforms|cli|"
                       r"tests|docs)/[\w./{},*-]*)")
OUTPUT_FLAGS = ("-o", "--output", "--out", "--job", "--images")  # their values are written

# what cannot be checked on this machine, and why (a shown command must match one of these or
# be a run_pipeline.py / python -m / make command)
UNCHECKED = {
    r"^git clone ": "needs the repository's URL and the network; the Quick start's other lines "
                   "run in tests/test_quickstart.py",
    r"^docker (build|push) ": "no Docker daemon here; tests/test_staging.py checks the "
                              "Dockerfile's BEAM_VERSION and PYTHON_VERSION against the launcher",
    r"^gcloud ": "needs a Google Cloud project; tests/test_staging.py checks "
                 "templates/metadata.json and the entry point",
    r"^sudo (cp|systemctl) |^systemctl ": "needs root and systemd on the target host; the unit "
                                          "files it names are checked to exist",
    r"^pip install -r ": "installs Airflow (~2 min, 2.2 GB): `make test` builds .venv-airflow "
                         "with it for tests/test_airflow_dag.py; the file is checked to exist",
    r"^CRON_TZ=": "a line of the cron file, checked against examples/schedule/etl-daily.cron",
    r"^\.venv/bin/python train\.py$": "the Quick start's train.py: tests/test_quickstart.py "
                                        "saves the block and runs it exactly so",
}


@dataclass(frozen=True)
class Shown:
    file: str  # relative to the checkout
    line: int
    text: str  # one command, continuation lines joined, the trailing comment removed
    block: str  # the fence's language, or "inline"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def _split(text: str) -> tuple[list[tuple[str, int, list[str]]], str]:
    """(fenced blocks as (language, first line number, lines), the prose with blocks blanked)."""
    blocks, prose, lines, i = [], [], text.split("\n"), 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if fence:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            blocks.append((fence.group(1), i + 2, lines[i + 1:j]))
            prose.extend([""] * (j - i + 1))
            i = j + 1
        else:
            prose.append(lines[i])
            i += 1
    return blocks, "\n".join(prose)


def _strip_comment(line: str) -> str:
    """A shell line without its trailing `# comment` (a `#` inside quotes or a word stays)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shown_commands() -> list[Shown]:
    found = []
    for path in DOCS:
        name = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as fh:
            blocks, prose = _split(fh.read())
        for lang, first, lines in blocks:
            if lang not in COMMAND_BLOCKS:
                continue
            current: list[str] = []
            start = first
            for n, raw in enumerate(lines, first):
                line = _strip_comment(raw)
                continues = bool(current) and (current[-1].endswith("\\")
                                               or (lang == "" and raw[:1].isspace()))
                if continues:
                    current[-1] = current[-1].removesuffix("\\")
                    current.append(line.strip())
                    continue
                if current:
                    found.append(Shown(name, start, " ".join(" ".join(current).split()), lang))
                current, start = ([line.strip()] if line.strip() else []), n
            if current:
                found.append(Shown(name, start, " ".join(" ".join(current).split()), lang))
        for m in re.finditer(r"`([^`]+)`", prose):
            text = " ".join(m.group(1).split())
            if INLINE_START.match(text) and text != "run_pipeline.py":
                found.append(Shown(name, prose.count("\n", 0, m.start()) + 1, text, "inline"))
    return found


SHOWN = shown_commands()


# ---- what the commands may name ---------------------------------------------------------------
def _options(help_text: str) -> dict[str, frozenset[str] | None]:
    """option -> its choices (None: any value), from the option column of argparse's help."""
    out: dict[str, frozenset[str] | None] = {}
    for line in help_text.splitlines():
        if not re.match(r"^ {2,}-\S", line):
            continue
        column = re.split(r"\s{2,}", line.strip())[0]
        for opt, choices in re.findall(r"(?:^|[\s,])(-{1,2}[A-Za-z][\w-]*)(?:[ =](\{[^}]*\}))?",
                                       column):
            out[opt] = frozenset(choices.strip("{}").split(",")) if choices else None
    return out


def _help(argv: list[str]) -> str:
    done = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (argv, done.stderr[-2000:])
    return done.stdout


@functools.cache
def cli_options(sub: str) -> dict[str, frozenset[str] | None]:
    return _options(_help([RUN, sub]))


@functools.cache
def module_options(module: str) -> dict[str, frozenset[str] | None]:
    return _options(_help(["-m", module]))


@functools.cache
def beam_options() -> frozenset[str]:
    """Every option of Beam's PipelineOptions classes (what `run` passes on untouched)."""
    from apache_beam.options import pipeline_options as po  # noqa: PLC0415 - ~1.7 s import

    parser = po._BeamArgumentParser(allow_abbrev=False)
    seen: dict[str, type] = {}
    for cls in po.PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)
    return frozenset(s for a in parser._actions for s in a.option_strings)


@functools.cache
def make_targets() -> frozenset[str]:
    with open(os.path.join(ROOT, "Makefile")) as fh:
        return frozenset(re.findall(r"^([A-Za-z][\w-]*):", fh.read(), re.M))


# ---- parsing one shown command -----------------------------------------------------------------
def _tokens(text: str) -> list[str]:
    """Shell words of a command as shown: `$(...)` and synopsis brackets taken out, cut at the
    first redirection or `&&`, `;`, `&`."""
    text = re.sub(r"\$\([^)]*\)", "X", text)
    text = re.split(r"\s(?:&&|;|&|>>|>|2>&1|\|\|)(?:\s|$)|;\s", " " + text + " ", maxsplit=1)[0]
    return shlex.split(text.replace("[", " ").replace("]", " ").replace("…", ""))


def cli_argv(shown: Shown) -> list[str] | None:
    """The words after `run_pipeline.py` (a bare `run JOB ...` in the prose is the same), or
    None when the command is not ours."""
    text = shown.text
    if shown.block == "inline" and text.split()[0] in SUBCOMMANDS:
        text = "run_pipeline.py " + text
    if "run_pipeline.py" not in text:
        if text.startswith("make run ARGS="):
            return _tokens(shlex.split(text)[2].removeprefix("ARGS="))
        return None
    words = text.split("run_pipeline.py", 1)[1]
    return _tokens(words)


def module_argv(shown: Shown) -> tuple[str, list[str]] | None:
    m = re.search(r"(?:^|\s)\S*python3?\s+-m\s+(\S+)(.*)", shown.text)
    if m:
        return m.group(1), _tokens(m.group(2))
    if shown.text.startswith("make bench"):
        args = shlex.split(shown.text)[2:]
        return "benchmarks.run", _tokens(args[0].removeprefix("ARGS=")) if args else []
    return None


def _flag_problems(argv: list[str], options: dict[str, frozenset[str] | None],
                   extra: frozenset[str] = frozenset()) -> list[str]:
    wrong = []
    for i, word in enumerate(argv):
        if not re.match(r"^-{1,2}[A-Za-z]", word):
            continue
        name, eq, value = word.partition("=")
        if name in options:
            choices = options[name]
            shown = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if choices and re.fullmatch(r"[a-z|]+", shown or "-"):
                wrong += [f"{name} {v} (choices: {sorted(choices)})"
                          for v in shown.split("|") if v not in choices]
        elif name not in extra:
            wrong.append(f"unknown option {name}")
    return wrong


def how_checked(shown: Shown) -> str:
    """What this test does with a shown command ('' when nothing covers it)."""
    if shown.block == "cron" and "run_pipeline.py" not in shown.text:
        return "cron file line"
    if cli_argv(shown) is not None:
        return "run_pipeline.py subcommand and flags"
    if module_argv(shown) is not None:
        return "module exists, flags in its --help"
    if shown.text.startswith("make "):
        return "Makefile target"
    for pattern, reason in UNCHECKED.items():
        if re.search(pattern, shown.text):
            return "not run: " + reason
    return ""


# ---- the checks --------------------------------------------------------------------------------
def test_the_docs_show_commands() -> None:
    """The extraction works: the pages' command blocks and inline commands are all seen."""
    by_file = {s.file for s in SHOWN}
    assert {"README.md", "docs/cloud.md", "docs/scheduling.md", "docs/tools.md"} <= by_file
    texts = {s.text for s in SHOWN}
    assert "make test" in texts and "python run_pipeline.py history out/daily" in texts
    assert len(SHOWN) > 40, len(SHOWN)


def test_every_shown_command_has_a_check() -> None:
    """A new command in the docs must be runnable here, parse, or be listed in UNCHECKED."""
    uncovered = [str(s) for s in SHOWN if not how_checked(s)]
    assert uncovered == []
    for pattern in UNCHECKED:  # no stale entries
        assert any(re.search(pattern, s.text) for s in SHOWN), pattern


def cli_problems(shown: Shown) -> list[str]:
    argv = cli_argv(shown)
    if argv is None:
        return []
    sub = argv[0] if argv and argv[0] in SUBCOMMANDS else "demo"
    if argv and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
        return [f"{shown}: no subcommand {argv[0]!r}"]
    rest = argv[1:] if argv and argv[0] == sub else argv
    beam = beam_options() if sub in ("run", "demo") else frozenset()
    return [f"{shown}: {p}" for p in _flag_problems(rest, cli_options(sub), beam)]


def module_problems(shown: Shown) -> list[str]:
    found = module_argv(shown)
    if found is None:
        return []
    module, argv = found
    if importlib.util.find_spec(module) is None:
        return [f"{shown}: no module {module}"]
    if any(w.startswith("-") for w in argv):
        return [f"{shown}: {p}" for p in _flag_problems(argv, module_options(module))]
    return []


@pytest.mark.slow
def test_run_pipeline_commands_use_real_subcommands_and_flags() -> None:
    assert [p for s in SHOWN for p in cli_problems(s)] == []


@pytest.mark.slow
def test_module_commands_exist_with_their_flags() -> None:
    assert [p for s in SHOWN for p in module_problems(s)] == []


@pytest.mark.slow
def test_the_checks_catch_wrong_commands() -> None:
    """The checks cannot pass by finding nothing: planted mistakes are all reported."""
    def shown(text: str, block: str = "sh") -> Shown:
        return Shown("planted.md", 1, text, block)

    assert cli_problems(shown("python run_pipeline.py run J.yaml --ouput x")) == [
        "planted.md:1: python run_pipeline.py run J.yaml --ouput x: unknown option --ouput"]
    assert cli_problems(shown("python run_pipeline.py run J.yaml --only some"))[0].endswith(
        "--only some (choices: ['all', 'failed', 'missing'])")
    assert cli_problems(shown("python run_pipeline.py verify OUT --runner=DataflowRunner"))
    assert cli_problems(shown("python run_pipeline.py convert J.yaml"))
    assert cli_problems(shown("run J.yaml --no_such_beam_option=1", "inline"))
    assert cli_problems(shown('make run ARGS="run J.yaml --nope"'))
    assert not cli_problems(shown("python run_pipeline.py run J.yaml --runner=DataflowRunner "
                                  "--project=p --max_num_workers=2 --only missing"))
    assert module_problems(shown("python -m benchmarks.run --rowz 5"))
    assert module_problems(shown("python -m benchmarks.no_such_module"))
    assert how_checked(shown("curl https://example.com")) == ""


def test_make_commands_name_real_targets() -> None:
    shown = [s for s in SHOWN if s.text.startswith("make ")]
    assert shown
    for s in shown:
        assert shlex.split(s.text)[1] in make_targets(), str(s)
    assert make_run_recipe()[-1] == "$(PY) run_pipeline.py $(ARGS)"  # what `make run` passes on


def test_files_named_in_commands_exist() -> None:
    missing = []
    for shown in SHOWN:
        words = shown.text.split()
        for i, word in enumerate(words):
            if i and words[i - 1] in OUTPUT_FLAGS:
                continue  # written by the command
            for m in REPO_PATH.finditer(word):
                path = m.group(1).rstrip(".,")
                braces = re.match(r"(.*)\{([^}]*)\}(.*)", path)
                paths = ([braces.group(1) + b + braces.group(3) for b in braces.group(2).split(",")]
                         if braces else [path])
                missing += [f"{shown}: {p}" for p in paths if not glob.glob(os.path.join(ROOT, p))]
    assert missing == []


def test_the_cron_block_is_the_shipped_cron_file() -> None:
    with open(os.path.join(ROOT, "examples", "schedule", "etl-daily.cron")) as fh:
        shipped = set(fh.read().splitlines())
    cron = [s for s in SHOWN if s.block == "cron"]
    assert len(cron) == 2
    assert [s.text for s in cron if s.text not in shipped] == []


def test_no_command_hides_in_an_unchecked_block() -> None:
    """Commands in indented code blocks or ```text fences would escape every check above."""
    hidden = []
    for path in DOCS:
        with open(path, encoding="utf-8") as fh:
            blocks, prose = _split(fh.read())
        for lang, first, lines in blocks:
            if lang not in COMMAND_BLOCKS:
                hidden += [f"{path}:{first + i}: {ln}" for i, ln in enumerate(lines)
                           if re.match(r"\s*(\$ )?(python3? |\.venv/bin/python |make )", ln)]
        hidden += [f"{path}: {ln}" for ln in prose.splitlines()
                   if re.match(r"( {4}|\t)(\$ )?(python3? |\.venv/bin/python |make )", ln)]
    assert hidden == []


@pytest.mark.slow
def test_run_help_prints_the_exit_codes() -> None:
    """README: "`run --help` prints this table (codes 0-6)"."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        assert "`run --help` prints this table\n(codes 0-6)" in fh.read()
    text = _help([RUN, "run"])
    for code in range(7):
        assert re.search(rf"^\s+{code}\s+\S", text, re.M), code


# ---- links -------------------------------------------------------------------------------------
def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@functools.cache
def anchors(path: str) -> frozenset[str]:
    with open(path, encoding="utf-8") as fh:
        _, prose = _split(fh.read())
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6} (.+)$", prose, re.M):
        slug = _slug(m.group(1))
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return frozenset(out)


def test_links_and_anchors_resolve() -> None:
    broken, anchored = [], 0
    for path in LINKED:
        with open(path, encoding="utf-8") as fh:
            _, prose = _split(fh.read())
        for m in re.finditer(r"\]\(([^)\s]+)\)", prose):
            target = m.group(1)
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(dest):
                broken.append(f"{os.path.relpath(path, ROOT)}: {target} (no such file)")
            elif anchor and anchor not in anchors(dest):
                broken.append(f"{os.path.relpath(path, ROOT)}: {target} (no such heading)")
            anchored += bool(anchor)
    assert broken == []
    assert anchored >= 10  # links into sections were found and checked
    assert _slug("What will it take? `run JOB --estimate`") == "what-will-it-take-run-job---estimate"
    assert "the-readers-rule" in anchors(os.path.join(ROOT, "docs", "cloud.md"))


def test_readme_is_a_front_page() -> None:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    assert text.count("\n") <= 250
    more = text.split("\n## More\n", 1)[1]
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)", more))
    assert linked == {os.path.relpath(p, ROOT) for p in DOCS[1:]}  # every docs page, once


# ---- run for real ------------------------------------------------------------------------------
# shown command -> (what runs instead of the words after `run_pipeline.py`, or a module's
# argv; None: exactly as shown), expected exit code, a line the output must hold.
# Replacements: JOB.yaml / daily.yaml -> bundled jobs, data/train.csv -> examples/data/iris.csv,
# the IDX names -> the bundled digits, OUT -> the demo's output, out/2024-05-0N -> two spans.
RUNS: dict[str, list[tuple[list[str] | None, int, str]]] = {
    "python run_pipeline.py history out/daily": [(None, 0, "2026-11-21")],
    "python run_pipeline.py verify OUT --quick": [
        (["verify", "out/demo"], 0, "OK "), (["verify", "out/demo", "--quick"], 0, "OK ")],
    "python run_pipeline.py spec SCHEMA.yaml": [
        (["spec", "schemas/mnist.yaml"], 0, "FixedLenFeature")],
    "python run_pipeline.py infer-schema data/train.csv": [
        (["infer-schema", "examples/data/iris.csv"], 0, "features:")],
    "python run_pipeline.py infer-schema image=train-images-idx3-ubyte.gz "
    "label=train-labels-idx1-ubyte.gz": [
        (["infer-schema", "image=examples/data/digits-train-images-idx3-ubyte.gz",
          "label=examples/data/digits-train-labels-idx1-ubyte.gz"], 0, "image:")],
    # data/iris.parquet is made from the bundled iris.csv by the workspace fixture
    "python run_pipeline.py infer-schema data/*.parquet -o schemas/mine.yaml --job jobs/mine.yaml":
        [(None, 0, "wrote jobs/mine.yaml"), (["run", "jobs/mine.yaml"], 0, "total")],
    "python run_pipeline.py inspect out/demo --limit 3 --images digits-png": [
        (None, 0, "digits-png/")],
    "python run_pipeline.py report out/2024-05-02 --against out/2024-05-01": [
        (["report", "out/daily/2026-11-21", "--against", "out/daily/2026-11-20"], 0, "")],
    "python run_pipeline.py report gs://bucket/data --out reports/today": [
        (["report", "out/demo", "--out", "reports/today"], 0, "")],
    "make run ARGS=\"run examples/iris.yaml\"": [(["run", "examples/iris.yaml"], 0, "total")],
    "python run_pipeline.py run JOB.yaml --direct_running_mode=multi_processing "
    "--direct_num_workers=2": [
        (["run", "examples/sentences.yaml", "--direct_running_mode=multi_processing",
          "--direct_num_workers=2"], 0, "total")],
    "python run_pipeline.py run JOB.yaml --estimate --runner=DataflowRunner --project=PROJECT "
    "--region=us-central1 --temp_location=gs://BUCKET/tmp --machine_type=n2-standard-4 "
    "--num_workers=8": [
        (["run", "examples/iris.yaml", "--estimate", "--runner=DataflowRunner",
          "--project=my-project-123", "--region=us-central1", "--temp_location=gs://b/tmp",
          "--machine_type=n2-standard-4", "--num_workers=8"], 0, "cost")],
    "python -m transforms.staging dist/": [(None, 0, "requirements.txt")],
}
# run by the workspace fixture, in this order (the later checks read their outputs)
SETUP = [
    ("python run_pipeline.py", None, 0, "/out/demo in "),
    ("python run_pipeline.py run daily.yaml --date 2026-11-21",
     ["run", "examples/daily.yaml", "--date", "2026-11-21"], 0, "out/daily/2026-11-21"),
    # 2026-11-19 and -20 are converted, -21 is current, the 18 days without data fail (exit 2)
    ("python run_pipeline.py run daily.yaml --from 2026-11-01 --to 2026-11-21",
     ["run", "examples/daily.yaml", "--from", "2026-11-01", "--to", "2026-11-21"], 2,
     "2026-11-21  skipped"),
]
# shown commands with placeholders that stay unrun, and why
NOT_RUN = {
    "python run_pipeline.py run daily.yaml": "converts yesterday (UTC): the outcome depends "
                                             "on the clock; parsed only",
    "python run_pipeline.py infer-schema pictures/ --sample 2000": "needs an image folder; "
                                                                  "tests/test_infer_schema.py",
    "python run_pipeline.py report out/demo": "run by tests/test_quickstart.py",
}


def _synopsis(shown: str) -> str:
    return re.sub(r"\s+", " ", shown.replace("[", "").replace("]", "")).strip()


def _find(text: str) -> Shown:
    hits = ([s for s in SHOWN if s.text == text]
            or [s for s in SHOWN if _synopsis(s.text) == text])
    assert hits, f"not shown in the docs any more: {text!r}"
    return hits[0]


def _execute(ws: Path, shown: Shown, argv: list[str] | None) -> subprocess.CompletedProcess[str]:
    module = module_argv(shown)
    if argv is None:
        argv = [module[0], *shlex.split(shown.text.split(module[0], 1)[1])] if module else (
            cli_argv(shown) or [])
    cmd = [sys.executable, "-m", *argv] if module else [sys.executable, RUN, *argv]
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("docs")
    for folder in ("examples", "schemas"):
        shutil.copytree(os.path.join(ROOT, folder), ws / folder)
    import pyarrow.csv  # noqa: PLC0415 - only this fixture needs it
    import pyarrow.parquet  # noqa: PLC0415

    (ws / "data").mkdir()
    pyarrow.parquet.write_table(pyarrow.csv.read_csv(ws / "examples" / "data" / "iris.csv"),
                                ws / "data" / "iris.parquet")
    for text, argv, code, want in SETUP:
        done = _execute(ws, _find(text), argv)
        assert done.returncode == code, (text, done.stderr[-3000:])
        assert want in done.stdout, (text, done.stdout[-3000:])
    return ws


@pytest.mark.slow
@pytest.mark.parametrize("text", list(RUNS))
def test_shown_commands_run_for_real(workspace: Path, text: str) -> None:
    shown = _find(text)
    for argv, code, want in RUNS[text]:
        done = _execute(workspace, shown, argv)
        assert done.returncode == code, (text, argv, done.stderr[-3000:])
        assert want in done.stdout, (text, argv, done.stdout[-3000:])


def test_run_and_not_run_lists_name_shown_commands() -> None:
    for text in [*RUNS, *NOT_RUN, *(t for t, *_ in SETUP)]:
        _find(text)
