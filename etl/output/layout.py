"""The names of the files a published output holds (the output contract in docs/output.md):
one home, so the writer, `verify`, the guard, the reader and the tools spell them once. No
imports of ours: the reader (`import etl`) takes them without the writer's weight.

Beside a local output NAME, its work dir `.NAME.etl/` holds `lock.json`, one `run-RUN_ID/`
per run in progress (its MARKER written first; the old output set aside in PREVIOUS while
publishing) and `logs/`.
"""

import os
import re

MANIFEST = "manifest.json"
SUCCESS = "_SUCCESS"  # written last: the output is complete
SCHEMA_FILE = "schema.yaml"  # the schema as the run read it: what make_dataset decodes with
TFMD_FILE = "schema.pbtxt"  # the same schema as a TFMD Schema, for TFX and TFDV
META_FILES = (SCHEMA_FILE, TFMD_FILE, MANIFEST, SUCCESS)
REJECTED_DIR = "rejected"
REJECTED_FILE = f"{REJECTED_DIR}/rejected.jsonl"
PRODUCER = "tfrecord-etl"  # the manifest's producer tag: what makes an output ours
REPORT_FILES = ("report.json", "report.html")  # written by `report` beside the data, unlisted
# TFDS metadata (etl.output.tfds_info), listed; plus one NAME.labels.txt per labelled feature
TFDS_INFO_FILE = "dataset_info.json"
TFDS_FEATURES_FILE = "features.json"
STATS_FILE = "stats.json"  # the statistics the run gathered (etl.stats.dataset), listed

QUARANTINE_SUFFIX = ".quarantine"  # OUT.quarantine beside OUT: blocked runs (etl.output.quarantine)

MARKER = "_ETL_RUN.json"
RUN_PREFIX = "run-"
PREVIOUS = "previous-output"
LOGS = "logs"
# a run id (etl.schedule.idempotence.new_run_id): UTC start, 6 random hex digits, run key
RUN_ID = re.compile(r"\d{8}T\d{6}-[0-9a-f]{6}-[A-Za-z0-9_-]{1,200}")
# the files a run leaves in logs/: its log, its dead-letter records when it rejected too
# many, the note of who took its lock over (etl.output.lock.TAKEN)
LOG_SUFFIXES = (".log", ".rejected.jsonl", ".lock-taken.json")


def log_run_id(name: str) -> str | None:
    """The run id of a file name a run writes in logs/ (`RUN_ID.log`, ...), None for any
    other name: what log pruning may delete."""
    for suffix in LOG_SUFFIXES:
        if name.endswith(suffix) and RUN_ID.fullmatch(name[: -len(suffix)]):
            return name[: -len(suffix)]
    return None


def run_dir_id(name: str) -> str | None:
    """The run id of a `run-RUN_ID` directory name, None for any other name."""
    if name.startswith(RUN_PREFIX) and RUN_ID.fullmatch(name[len(RUN_PREFIX):]):
        return name[len(RUN_PREFIX):]
    return None


def work_dir(output: str) -> str:
    """`{parent}/.{name}.etl` of a local output."""
    parent, name = os.path.split(os.path.abspath(output).rstrip(os.sep))
    return os.path.join(parent, f".{name}.etl")


def run_dir(workdir: str, run_id: str) -> str:
    return os.path.join(workdir, RUN_PREFIX + run_id)


def log_path(workdir: str, run_id: str) -> str:
    return os.path.join(workdir, LOGS, f"{run_id}.log")
