"""The report as one self-contained HTML page: inline CSS, inline SVG plots, images as base64
PNG data URIs. It loads nothing (no script, no font, no URL), so it opens offline, from a
bucket download or a CI artifact alike."""

from __future__ import annotations

import base64
import html
from typing import Any

import numpy as np

from etl.base.units import format_size
from etl.contract.images import display_png
from etl.output.ownership import REPORT_GENERATOR

BAR = "#2a6fdb"  # every plot's bars (the screenshot test looks for this colour)
FLAG = "#c62828"
GRID_BG = "#fdf0d5"  # behind the sample images
CAPTION = "#3b2a00"  # the label under each sample image
CSS = f"""
body{{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d232b;
background:#fff}}
h1{{font-size:22px;margin:0 0 4px}} h2{{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #dde}}
h2 a.self{{color:inherit;text-decoration:none}}
.meta{{color:#5b6470;margin-bottom:14px}} code{{background:#f2f4f7;padding:1px 4px;border-radius:3px}}
table{{border-collapse:collapse;margin:6px 0 10px}} td,th{{padding:3px 10px;border-bottom:1px solid #eceff3;
text-align:right}} th{{background:#f6f8fa}} td:first-child,th:first-child{{text-align:left}}
table.overview td,table.overview th{{text-align:left}} table.overview td.num{{text-align:right}}
.splits{{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,540px),1fr));gap:16px}}
.card{{border:1px solid #dde1e7;border-radius:8px;padding:10px 14px;min-width:0}}
.card h3{{font-size:15px;margin:0 0 6px}}
.grid{{display:grid;grid-template-columns:repeat(8,56px);gap:6px;background:{GRID_BG};padding:8px;
border-radius:6px;width:max-content}} .grid figure{{margin:0;text-align:center}}
.grid img{{width:48px;height:48px;image-rendering:pixelated;display:block;margin:0 auto}}
.grid figcaption{{font-size:11px;line-height:14px;color:{CAPTION};white-space:nowrap;overflow:hidden;
text-overflow:ellipsis;max-width:56px}}
.row{{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}}
.flag{{color:{FLAG};font-weight:600}}
.ok{{color:#2e7d32;font-weight:600}} .small{{color:#5b6470;font-size:12px}}
svg text{{font:11px system-ui,sans-serif;fill:#444}}
@media print{{body{{margin:0;font-size:12px}} .card,table,svg,.grid{{break-inside:avoid}}
h2{{break-after:avoid}} a{{color:inherit;text-decoration:none}}}}
"""


def render(report: dict[str, Any], samples: dict[tuple[str, str], list[np.ndarray]]) -> str:
    """`samples`: (feature, split) -> the first decoded images of that split."""
    e = html.escape
    out = ["<!DOCTYPE html>",
           f'<html lang="en"><head><meta charset="utf-8"><meta name="generator" '
           f'content="{REPORT_GENERATOR}">',
           f"<title>Dataset report: {e(report['output'])}</title><style>{CSS}</style></head><body>",
           f"<h1>Dataset report: <code>{e(report['output'])}</code></h1>",
           f"<div class='meta'>schema <b>{e(report['schema']['name'])}</b> "
           f"({e(report['schema']['kind'])}) &middot; data in <code>{e(report['dataset_dir'])}"
           f"</code> &middot; report made {e(report['created'])}</div>"]
    out.append(_splits_table(report))
    out.append(overview(report))
    if report.get("drift"):
        out.append(_drift(report["drift"]))
    captions = report.get("sample_labels") or {}
    for name, feature in report["features"].items():
        out.append(_feature(name, feature, samples, report.get("drift"), captions))
    out.append("<p class='small'>Exact numbers unless marked <i>estimated</i>: value counts "
               "are exact below a distinct-value capacity (see report.json "
               "<code>value_counts_exact</code>), histograms marked estimated come from "
               "quantile sketches.</p></body></html>")
    return "\n".join(out)


def _splits_table(report: dict[str, Any]) -> str:
    rows = ["<h2>Overview</h2><div class='row'><table><tr><th>split</th><th>records</th>"
            "<th>bytes</th><th>shards</th></tr>"]
    for split, info in report["splits"].items():
        rows.append(f"<tr><td>{html.escape(split)}</td><td>{info['num_records']:,}</td>"
                    f"<td>{format_size(info['num_bytes'])}</td><td>{info['num_shards']}</td></tr>")
    total = sum(info["num_records"] for info in report["splits"].values())
    size = sum(info["num_bytes"] for info in report["splits"].values())
    shards = sum(info["num_shards"] for info in report["splits"].values())
    if len(report["splits"]) > 1:
        rows.append(f"<tr><th>all</th><th>{total:,}</th><th>{format_size(size)}</th>"
                    f"<th>{shards}</th></tr>")
    rows.append("</table>")
    counts = [info["num_records"] for info in report["splits"].values()]
    if len(counts) > 1:
        rows.append(bars_svg(list(report["splits"]), counts, "records per split", width=360,
                             height=130))
    rows.append("</div>")
    return "".join(rows)


def anchor(name: str) -> str:
    """The id of a feature's section (ids may not hold spaces; names are kept readable)."""
    return "feature-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def overview(report: dict[str, Any]) -> str:
    """One row per feature, as Facets' overview: dtype, shape, missing over all splits, a
    one-line summary, drift; the name links to the feature's section."""
    e = html.escape
    drift = report.get("drift")
    head = ("<table class='overview'><tr><th>feature</th><th>dtype</th><th>shape</th>"
            "<th>missing</th><th>summary</th>" + ("<th>drift</th>" if drift else "") + "</tr>")
    rows = [head]
    for name, f in report["features"].items():
        splits = list(f["splits"].values())
        records = sum(s["records"] for s in splits)
        counted = [s["missing"] for s in splits if s.get("missing") is not None]
        if len(counted) == len(splits):
            missing = sum(counted)
            share = f"{missing / records:.1%}" if records else "–"
            miss = f"{missing:,} ({share})"
        else:
            miss = "not counted"
        kind = f["dtype"] + (", " + f["encoding"] if f.get("encoding", "values") != "values" else "")
        if f.get("sequence"):
            kind += ", sequence"
        cell = ""
        if drift:
            d = drift["features"].get(name) or {}
            cell = ("<td class='flag'>drift</td>" if d.get("flagged")
                    else "<td class='ok'>ok</td>" if d.get("splits") else "<td>–</td>")
        rows.append(f"<tr data-feature='{e(name)}'><td><a href='#{anchor(name)}'>{e(name)}</a></td>"
                    f"<td>{e(kind)}</td><td>{e(_shape(f['shape']))}</td><td class='num'>{miss}</td>"
                    f"<td>{e(summary(f))}</td>{cell}</tr>")
    rows.append("</table>")
    return "".join(rows)


def _shape(shape: list[int]) -> str:
    return "[" + ", ".join("?" if d < 0 else str(d) for d in shape) + "]"


def summary(f: dict[str, Any]) -> str:
    """One line about a feature over all its splits: the top value and the distinct count
    for categories; min..max and the mean for numbers; the lengths of variable ones."""
    splits = [s for s in f["splits"].values() if s.get("values")]
    if not splits:
        return "no values"
    parts = []
    if f.get("categorical"):
        exact = all(s.get("value_counts") is not None for s in splits)
        counts: dict[Any, int] = {}
        for s in splits:
            pairs = s["value_counts"] if exact else [[t["value"], t["count"]]
                                                     for t in s["top_values"]]
            for v, c in pairs:
                counts[v] = counts.get(v, 0) + c
        vocab = f.get("vocabulary") or []
        if counts:
            top, n = max(counts.items(), key=lambda p: (p[1], -_order(p[0])))
            text = (vocab[top] if vocab and isinstance(top, int) and 0 <= top < len(vocab)
                    else str(top))
            total = sum(s["values"] for s in splits)
            parts.append(f"top {text} ({n / total:.0%})" if exact else f"top {text}")
        distinct = len(counts) if exact else max(s["distinct"] for s in splits)
        parts.append(f"{distinct:,} distinct" if exact else f"~{distinct:,} distinct")
    elif "min" in splits[0]:
        lo = min(s["min"] for s in splits)
        hi = max(s["max"] for s in splits)
        values = sum(s["values"] for s in splits)
        measured = [s for s in splits if s["values"]]
        if any(s["mean"] is None for s in measured):  # values near float64's limit
            said = "overflows float64"
        else:
            said = _fmt(sum(s["mean"] * s["values"] for s in measured) / values)
        what = "pixels " if f.get("image") else ""
        parts.append(f"{what}{_fmt(lo)}..{_fmt(hi)}, mean {said}")
    lengths = [s["lengths"] for s in splits if s.get("lengths") and s["lengths"].get("min")
               is not None]
    if lengths:
        per = "steps" if f.get("sequence") else "values"
        parts.append(f"{per} per record {_fmt(min(x['min'] for x in lengths))}.."
                     f"{_fmt(max(x['max'] for x in lengths))}")
    return "; ".join(parts)


def _order(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def _drift(drift: dict[str, Any]) -> str:
    e = html.escape
    head = ("<span class='flag'>drift flagged</span>" if drift["flagged"]
            else "<span class='ok'>no drift over the thresholds</span>")
    th = drift["thresholds"]
    parts = [f"<h2>Comparison with <code>{e(drift['against'])}</code></h2><p>{head} "
             f"<span class='small'>(thresholds: record count change &gt; "
             f"{th['count_relative_change']:.0%}, categorical L&infin; &gt; "
             f"{th['categorical_linf']}, numeric Jensen-Shannon &gt; "
             f"{th['numeric_jensen_shannon']})</span></p>"]
    if drift["findings"]:
        parts.append("<ul>" + "".join(f"<li class='flag'>{e(f)}</li>" for f in drift["findings"])
                     + "</ul>")
    parts.append("<table><tr><th>split</th><th>records</th><th>other output</th><th>change</th></tr>")
    for split, s in drift["splits"].items():
        change = "" if s["relative_change"] is None else f"{s['relative_change']:+.1%}"
        cls = " class='flag'" if s["flagged"] else ""
        parts.append(f"<tr{cls}><td>{e(split)}</td><td>{s['num_records']}</td>"
                     f"<td>{s['against']}</td><td>{change}</td></tr>")
    parts.append("</table><table><tr><th>feature</th><th>split</th><th>metric</th><th>value</th>"
                 "</tr>")
    for name, f in drift["features"].items():
        for split, r in (f.get("splits") or {}).items():
            own = r["value"] > r["threshold"]  # a flagged component is marked on its own row
            cls = " class='flag'" if own else ""
            parts.append(f"<tr{cls}><td>{e(name)}</td><td>{e(split)}</td><td>{r['metric']}</td>"
                         f"<td>{r['value']:.4f}</td></tr>")
            for comp, c in (r.get("components") or {}).items():
                cls = " class='flag'" if c["flagged"] else ""
                parts.append(f"<tr{cls}><td>&nbsp;&nbsp;{e(comp)}</td><td>{e(split)}</td>"
                             f"<td>{c['metric']}</td><td>{c['value']:.4f}</td></tr>")
    parts.append("</table>")
    return "".join(parts)


def _feature(name: str, feature: dict[str, Any], samples: dict[tuple[str, str], list[np.ndarray]],
             drift: dict[str, Any] | None, captions: dict[str, Any]) -> str:
    e = html.escape
    desc = f"{feature['dtype']} {feature['shape']}"
    if feature.get("encoding", "values") != "values":
        desc += f", {feature['encoding']}"
    if feature.get("sequence"):
        desc += ", sequence (per step)"
    if feature.get("vocabulary"):
        desc += f", vocabulary of {len(feature['vocabulary'])}"
    flagged = bool(drift and drift["features"].get(name, {}).get("flagged"))
    parts = [f"<h2 id='{anchor(name)}'><a class='self' href='#{anchor(name)}'>{e(name)}</a> "
             f"<span class='small'>{e(desc)}</span>"
             + (" <span class='flag'>drift</span>" if flagged else "") + "</h2><div class='splits'>"]
    for split, s in feature["splits"].items():
        parts.append(f"<div class='card'><h3>{e(split)}</h3>")
        images = samples.get((name, split))
        if images:
            labels = (captions.get("splits") or {}).get(split) or []
            parts.append(_grid(images, feature, labels, captions.get("feature")))
        parts.append("<div class='row'>" + _stats_table(s, feature))
        if feature.get("categorical") and s.get("top_values"):
            parts.append(_top_plot(s, feature))
        elif s.get("histogram"):
            parts.append(_hist_svg(s["histogram"], f"{name} values", span=(s["min"], s["max"])))
        parts.append("</div>")
        if s.get("components"):
            parts.append(_components(s["components"]))
        if s.get("lengths") and s["lengths"].get("histogram"):
            what = "steps per record" if feature.get("sequence") else "values per record"
            lengths = s["lengths"]
            parts.append(_hist_svg(lengths["histogram"], what, span=(lengths["min"], lengths["max"])))
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def _stats_table(s: dict[str, Any], feature: dict[str, Any]) -> str:
    rows = [("records", s["records"]), ("missing", s["missing"]), ("values", s.get("values"))]
    if "min" in s and not feature.get("vocabulary"):
        rows += [("min", s.get("min")), ("max", s.get("max")), ("mean", s.get("mean")),
                 ("stddev", s.get("stddev")), ("zeros", s.get("zeros"))]
    if s.get("lengths"):
        lengths = s["lengths"]
        rows.append(("length min / mean / max",
                     f"{_fmt(lengths['min'])} / {_fmt(lengths['mean'])} / {_fmt(lengths['max'])}"))
    if "byte_length" in s:
        b = s["byte_length"]
        rows.append(("bytes per value", f"{_fmt(b['min'])} .. {_fmt(b['max'])}"))
    rows.append(("distinct", f"{s.get('distinct')}" + ("" if s.get("value_counts_exact")
                                                        else " (estimated)")))
    return "<table>" + "".join(f"<tr><td>{k}</td><td>{_fmt(v)}</td></tr>" for k, v in rows) + "</table>"


def _top_plot(s: dict[str, Any], feature: dict[str, Any]) -> str:
    pairs = s.get("value_counts") or [[t["value"], t["count"]] for t in s["top_values"]]
    vocab = feature.get("vocabulary") or []
    if feature["dtype"] != "bytes":
        pairs = sorted(pairs, key=lambda p: p[0])

    def label(v: Any) -> str:
        if vocab and isinstance(v, int) and 0 <= v < len(vocab):
            return vocab[v]
        return str(v)

    pairs = pairs[:40]
    return bars_svg([label(v) for v, _ in pairs], [c for _, c in pairs],
                    "value counts" if s.get("value_counts") else "top values")


def _components(comps: dict[str, Any]) -> str:
    rows = ["<table><tr><th>component</th><th>min</th><th>max</th><th>mean</th><th>stddev</th></tr>"]
    for name, c in comps.items():
        rows.append(f"<tr><td>{html.escape(name)}</td><td>{_fmt(c['min'])}</td><td>{_fmt(c['max'])}"
                    f"</td><td>{_fmt(c['mean'])}</td><td>{_fmt(c['stddev'])}</td></tr>")
    rows.append("</table>")
    plots = [_hist_svg(c["histogram"], name, width=250, height=110, span=(c["min"], c["max"]))
             for name, c in comps.items() if c.get("histogram")]
    if plots:
        rows.append("<div class='row'>" + "".join(plots) + "</div>")
    return "".join(rows)


def _hist_svg(h: dict[str, Any], title: str, width: int = 360, height: int = 140,
              span: tuple[Any, Any] | None = None) -> str:
    """Bars per value, or binned: the x axis marked with the lowest and highest value (the
    data's own min and max when the bins follow its grid), the y axis with 0 and the peak."""
    note = "" if h["exact"] else " (estimated)"
    if h["kind"] == "values":
        return bars_svg([str(v) for v in h["values"]], h["counts"], title + note, width, height)
    edges = h["edges"]
    lo, hi = span if h.get("aligned") and span else (edges[0], edges[-1])
    labels = [_fmt(lo)] + [""] * (len(h["counts"]) - 2) + [_fmt(hi)]
    return bars_svg(labels[: len(h["counts"])], h["counts"], title + note, width, height,
                    gapless=True)


def bars_svg(labels: list[str], counts: list[float], title: str, width: int = 360,
             height: int = 140, gapless: bool = False) -> str:
    """A bar chart as inline SVG: bars, the y axis from 0 to the largest count, and the
    labels that fit."""
    n = max(len(counts), 1)
    left, top, bottom = 50, 18, 30
    plot_w, plot_h = width - left - 8, height - top - bottom
    peak = max(counts) if counts and max(counts) > 0 else 1
    step = plot_w / n
    gap = 0 if gapless else min(4.0, step * 0.2)
    e = html.escape
    parts = [f"<svg width='{width}' height='{height}' "
             f"role='img'><title>{e(title)}</title>",
             f"<text x='{left}' y='12'>{e(title)}</text>",
             f"<text x='{left - 4}' y='{top + 9}' text-anchor='end'>{_fmt(peak)}</text>",
             f"<text x='{left - 4}' y='{top + plot_h}' text-anchor='end'>0</text>",
             f"<line x1='{left}' y1='{top + plot_h}' x2='{left + plot_w}' y2='{top + plot_h}' "
             "stroke='#999'/>",
             f"<line x1='{left - 0.5}' y1='{top}' x2='{left - 0.5}' y2='{top + plot_h}' "
             "stroke='#999'/>",
             f"<line x1='{left - 3}' y1='{top + 0.5}' x2='{left}' y2='{top + 0.5}' stroke='#999'/>"]
    every = max(1, int(np.ceil(n / max(1, plot_w // 28))))
    for i, (lab, c) in enumerate(zip(labels, counts, strict=False)):
        h = plot_h * (c / peak) if c > 0 else 0
        x = left + i * step + gap / 2
        parts.append(f"<rect x='{x:.1f}' y='{top + plot_h - h:.1f}' width='{max(step - gap, 1):.1f}' "
                     f"height='{h:.1f}' fill='{BAR}'><title>{e(str(lab))}: {_fmt(c)}</title></rect>")
        if lab and (i % every == 0 or gapless):
            room = max(6, int(step * every / 6.5))  # characters that fit under the bars
            short = lab if len(lab) <= room else lab[: room - 1] + "…"
            anchor = "start" if gapless and i == 0 else "end" if gapless else "middle"
            tx = x if anchor == "start" else (x + step - gap if gapless else x + (step - gap) / 2)
            parts.append(f"<text x='{tx:.1f}' y='{top + plot_h + 14}' text-anchor='{anchor}'>"
                         f"{e(short)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _grid(images: list[np.ndarray], feature: dict[str, Any], labels: list[str],
          label_feature: str | None) -> str:
    """The first images of a split, each over the label of its record (when the schema has a
    label: see etl.stats.accumulators.label_feature), so mislabelled data shows at a glance."""
    e = html.escape
    peak = feature.get("pixel_max") or 255
    tags = []
    for i, img in enumerate(images):
        label = labels[i] if i < len(labels) else None
        cap = (f"<figcaption title='{e(label_feature or '')} = {e(label)}'>{e(label)}</figcaption>"
               if label is not None else "")
        alt = f"sample {i}" + (f": {label_feature} {label}" if label is not None else "")
        tags.append(f"<figure><img alt='{e(alt)}' src='data:image/png;base64,"
                    f"{png_base64(img, peak)}'>{cap}</figure>")
    note = (f"<div class='small'>the first {len(images)} records, captioned with "
            f"<code>{e(label_feature)}</code></div>" if label_feature and labels else
            f"<div class='small'>the first {len(images)} records</div>")
    return f"<div class='grid'>{''.join(tags)}</div>{note}"


def png_base64(image: np.ndarray, peak: float) -> str:
    """One decoded image for the page (etl.contract.images.display_png), base64 for a data: URI."""
    return base64.b64encode(display_png(image, peak)).decode("ascii")


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool) or isinstance(v, str):
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
    return html.escape(str(v))
