"""The inferred schema and job as YAML text with comments (PyYAML cannot write comments).

Every value goes through `yaml.safe_dump`, so quoting is PyYAML's; the caller loads the text
back through `etl.contract.schema` before writing it, so a schema that would not load is never written.
"""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from etl.tools.infer.guess import Guess

_WIDTH = 100
_ORDER = ("dtype", "unit", "format", "shape", "encoding", "default", "required", "source",
          "allow_nan", "vocabulary")
SPLIT = {"train": 0.8, "test": 0.2}  # the written job's split


def scalar(value: Any) -> str:
    """One YAML scalar or flow list, as PyYAML writes it (text as text: `Tørgersen`, not
    `"T\\xF8rgersen"`)."""
    return yaml.safe_dump([value], default_flow_style=True, width=10**9,
                          allow_unicode=True).strip()[1:-1]


def comment(text: str, indent: str, prefix: str = "# ") -> list[str]:
    first = indent + prefix
    rest = indent + "# " + " " * (len(prefix) - 2)
    return textwrap.wrap(text, _WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False, break_long_words=False)


def schema_yaml(name: str, header: list[str], guesses: list[Guess]) -> str:
    lines = [line for h in header for line in comment(h, "")]
    lines += [f"name: {scalar(name)}", "kind: example", "features:"]
    for g in guesses:
        lines.append(f"  {scalar(g.name)}:")
        for note in g.notes:
            lines += comment(note, "    ", "# review: ")
        for key in sorted(g.spec, key=_ORDER.index):
            value = g.spec[key]
            if key == "vocabulary":
                lines.append("    vocabulary:")
                width = max(len(scalar(v)) for v in value)
                for v in value:
                    lines.append(f"      - {scalar(v):<{width}}  # {g.counts[v]} {g.counted}")
            elif key == "default" and g.fills:
                lines.append(f"    {key}: {scalar(value)}  # {g.fills}")
            else:
                lines.append(f"    {key}: {scalar(value)}")
    return "\n".join(lines) + "\n"


def job_yaml(header: list[str], schema_path: str, source: dict[str, Any], output: str,
             source_notes: dict[str, str] | None = None) -> str:
    """The job file; `source_notes`: a comment above a source key (why `null_values:` lists
    what it lists, what `encoding:` was sniffed from)."""
    lines = [line for h in header for line in comment(h, "")]
    lines.append(f"schema: {scalar(schema_path)}")
    lines.append("source:")
    for key, value in source.items():
        if source_notes and key in source_notes:
            lines += comment(source_notes[key], "  ", "# review: ")
        lines.append(f"  {key}: {scalar(value)}")
    lines += ["# review: the split fractions (records are assigned by a hash of their position)",
              f"split: {{{', '.join(f'{k}: {v}' for k, v in SPLIT.items())}}}",
              f"output: {scalar(output)}",
              "shuffle: {seed: 0}"]
    return "\n".join(lines) + "\n"
