"""The names of the files a published output holds (the output contract in docs/output.md):
one home, so the writer, `verify`, the guard, the reader and the tools spell them once. No
imports: the reader (`import etl`) takes them without the writer's weight.
"""

MANIFEST = "manifest.json"
SUCCESS = "_SUCCESS"  # written last: the output is complete
SCHEMA_FILE = "schema.yaml"  # the schema as the run read it: what make_dataset decodes with
TFMD_FILE = "schema.pbtxt"  # the same schema as a TFMD Schema, for TFX and TFDV
META_FILES = (SCHEMA_FILE, TFMD_FILE, MANIFEST, SUCCESS)
REJECTED_DIR = "rejected"
REJECTED_FILE = f"{REJECTED_DIR}/rejected.jsonl"
PRODUCER = "tfrecord-etl"  # the manifest's producer tag: what makes an output ours
REPORT_FILES = ("report.json", "report.html")  # written by `report` beside the data, unlisted
