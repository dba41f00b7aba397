"""The one summary `infer-schema` prints: what it decided and why, in a few lines a person
reads once (the schema's `# review:` comments hold the detail). One line per topic, topics
with nothing to say left out:

    infer-schema: 17 features from all 344 records of penguins-raw.csv (csv)
      csv: delimiter ',', header row, encoding utf-8
      null markers: 'NA' in 336 cells (...) -> null_values: ['', NA] on the job's source
      dates: date_egg (date)
      vocabularies (text with at most 50 distinct values): species (3), island (3), ...
      defaults (a run fills and counts them): culmen_length_mm NaN fills 2 of 344 values, ...
      required, missing in the sample (a run rejects and counts those records): ...
      text kept as strings: individual_id (190 distinct), comments (...)
      names: 'species' and 'Species' both read as feature species: ...
      not in every file (optional): ...
      left out: 'x' (why)
      output: out/penguins_raw_csv_1a2b3c (the job's; named after the inputs)
"""

from __future__ import annotations

from typing import Any

from etl.tools.infer.dialect import Dialect, delimiter_name
from etl.tools.infer.guess import VOCAB_MAX
from etl.tools.infer.render import scalar

_SHOWN = 8


def _listed(items: list[str]) -> str:
    more = len(items) - _SHOWN
    return ", ".join(items[:_SHOWN]) + (f", ... ({more} more)" if more > 0 else "")


def _default_text(value: Any) -> str:
    if isinstance(value, float) and value != value:
        return "NaN"
    return repr(value)


def summary_lines(inf: Any, fmt: str, output: str | None) -> list[str]:
    """The summary's lines (the first unindented, the others indented by two spaces).
    `inf`: an etl.tools.infer.command.Inferred (not imported: command imports this module)."""
    gs = inf.guesses
    lines = [f"infer-schema: {len(gs)} features from {inf.sampled.what} ({fmt})"]
    if inf.dialect is not None:
        lines.append(_csv_line(inf.dialect))
    if inf.markers:
        lines.append(_markers_line(inf.markers, inf.source))
    dates = [f"{g.name} ({g.spec['dtype']}" + (f", unit {g.spec['unit']}" if "unit" in g.spec
                                               else "")
             + (f", format {g.spec['format']!r}" if "format" in g.spec else "") + ")"
             for g in gs if g.spec.get("dtype") in ("date", "timestamp")]
    if dates:
        lines.append(f"  dates: {_listed(dates)}")
    vocab = [f"{g.name} ({len(g.spec['vocabulary'])})" for g in gs if "vocabulary" in g.spec]
    if vocab:
        lines.append(f"  vocabularies (text with at most {VOCAB_MAX} distinct values, each seen "
                     f"twice on average): {_listed(vocab)}")
    defaults = [f"{g.name} {_default_text(g.spec['default'])} {g.fills}" for g in gs
                if "default" in g.spec and g.fills]
    if defaults:
        lines.append(f"  defaults (a run fills and counts them): {_listed(defaults)}")
    nulls = getattr(inf, "nulls", {})
    if nulls:
        lines.append("  NULLs in the sample: " + _listed(
            [f"{c} {k} of {inf.sampled.rows}" for c, k in nulls.items()]))
    required = [f"{g.name} ({g.unfilled} of {inf.sampled.rows})" for g in gs if g.unfilled]
    if required:
        lines.append("  required, but values missing in the sample (a run rejects and counts "
                     f"those records): {_listed(required)}")
    texts = [f"{g.name} ({g.distinct} distinct)" if g.distinct is not None else g.name
             for g in gs if g.spec.get("dtype") == "string" and "vocabulary" not in g.spec
             and g.kind in ("text", "bytes")]
    if texts:
        lines.append(f"  kept as strings: {_listed(texts)}")
    odd = [f"{g.name}: {n.split(':')[0]}" for g in gs for n in g.notes
           if n.startswith(("numbers with thousands", "mostly numbers", "numbers with leading"))]
    if odd:
        lines.append(f"  text that looks like numbers (kept as text): {_listed(odd)}")
    images = [f"{g.name} ({g.spec.get('encoding')}, shape {scalar(g.spec.get('shape'))})"
              for g in gs
              if g.kind.startswith("image")]
    if images:
        lines.append(f"  images: {_listed(images)}")
    if inf.renamed:
        lines.append(f"  names: {'; '.join(inf.renamed)}")
    if inf.absent:
        absent = [f"{c} (not in {len(f)} files)" for c, f in inf.absent.items()]
        lines.append(f"  not in every file (optional: a default, or required): "
                     f"{_listed(absent)}")
    if inf.left_out:
        lines.append(f"  left out: {'; '.join(inf.left_out)}")
    if output:
        lines.append(f"  output: {output} (the job's; named after its inputs and format)")
    return lines


def _csv_line(d: Dialect) -> str:
    """How the CSV files are read: the sniffed dialect and its notes."""
    how = (f"delimiter {delimiter_name(d.delimiter)}, "
           f"{'header row' if d.header else 'no header row (columns column_0..)'}, "
           f"encoding {d.encoding}")
    if d.skip_rows:
        how += f", skip_rows {d.skip_rows}"
    return f"  csv: {how}" + "".join(f"; {n}" for n in d.notes)


def _markers_line(markers: dict[str, dict[str, int]], source: dict[str, Any]) -> str:
    """The null markers found, the cells each fills, and the job's null_values for them."""
    parts = []
    for m, per in sorted(markers.items()):
        cols = ", ".join(f"{c}: {k}" for c, k in list(per.items())[:3])
        more = ", ..." if len(per) > 3 else ""
        parts.append(f"{m!r} in {sum(per.values())} cells ({cols}{more})")
    return (f"  null markers: {'; '.join(parts)} -> null_values: "
            f"{source.get('null_values')} on the job's source (missing values)")
