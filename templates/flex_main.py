"""Flex Template entry point: the template launcher runs

    python /template/flex_main.py --job=gs://... --output=gs://... [--date=YYYY-MM-DD] [Beam options]

and this turns it into `run_pipeline.py run JOB --output OUTPUT[/DATE] [Beam options]`. The
parameters are checked here against the same regexes as in metadata.json (Dataflow checks
them before launch; this check also covers runs started by hand)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

METADATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metadata.json")


def parameters(metadata: str = METADATA) -> dict[str, dict]:
    with open(metadata, encoding="utf-8") as fh:
        return {p["name"]: p for p in json.load(fh)["parameters"]}


def to_cli(argv: list[str], metadata: str = METADATA) -> list[str]:
    """Template parameters -> our command line; other options go to Beam untouched."""
    params = parameters(metadata)
    parser = argparse.ArgumentParser(prog="flex_main.py", allow_abbrev=False)
    for name, p in params.items():
        parser.add_argument(f"--{name}", required=not p.get("isOptional", False),
                            help=p["helpText"])
    known, beam_args = parser.parse_known_args(argv)
    for name, p in params.items():
        value = getattr(known, name)
        if value is not None and not all(re.fullmatch(rx, value) for rx in p.get("regexes", [])):
            parser.error(f"--{name}={value!r} is not a valid {p['label'].lower()}: {p['helpText']}")
    output = known.output.rstrip("/") + (f"/{known.date}" if known.date else "")
    return ["run", known.job, "--output", output, *beam_args]


def main(argv: list[str] | None = None) -> int:
    from run_pipeline import main as run  # noqa: PLC0415 - our installed console entry

    return run(to_cli(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
