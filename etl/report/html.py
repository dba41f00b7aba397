"""The report as one self-contained HTML page: inline CSS, inline SVG plots, images as base64
PNG data URIs. It loads nothing (no script, no font, no URL), so it opens offline, from a
bucket download or a CI artifact alike."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import numpy as np

from etl.manifest import REPORT_GENERATOR

BAR = "#2a6fdb"  # every plot's bars (the screenshot test looks for this colour)
FLAG = "#c62828"
GRID_BG = "#fdf0d5"  # behind the sample images
CSS = f"""
body{{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d232b;
background:#fff}}
h1{{font-size:22px;margin:0 0 4px}} h2{{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #dde}}
.meta{{color:#5b6470;margin-bottom:14px}} code{{background:#f2f4f7;padding:1px 4px;border-radius:3px}}
table{{border-collapse:collapse;margin:6px 0 10px}} td,th{{padding:3px 10px;border-bottom:1px solid #eceff3;
text-align:right}} th{{background:#f6f8fa}} td:first-child,th:first-child{{text-align:left}}
.splits{{display:flex;flex-wrap:wrap;gap:16px}} .card{{border:1px solid #dde1e7;border-radius:8px;
padding:10px 14px;min-width:300px}} .card h3{{font-size:15px;margin:0 0 6px}}
.grid{{display:grid;grid-template-columns:repeat(8,68px);gap:6px;background:{GRID_BG};padding:10px;
border-radius:6px;width:max-content}} .grid img{{width:64px;height:64px;image-rendering:pixelated;
border:2px solid {GRID_BG}}}
.row{{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}}
.flag{{color:{FLAG};font-weight:600}}
.ok{{color:#2e7d32;font-weight:600}} .small{{color:#5b6470;font-size:12px}}
svg text{{font:11px system-ui,sans-serif;fill:#444}}
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
    if report.get("drift"):
        out.append(_drift(report["drift"]))
    for name, feature in report["features"].items():
        out.append(_feature(name, feature, samples, report.get("drift")))
    out.append("<p class='small'>Exact numbers unless marked <i>estimated</i>: value counts "
               "are exact below a distinct-value capacity (see report.json "
               "<code>value_counts_exact</code>), histograms marked estimated come from "
               "quantile sketches.</p></body></html>")
    return "\n".join(out)


def _splits_table(report: dict[str, Any]) -> str:
    rows = ["<h2>Splits</h2><table><tr><th>split</th><th>records</th><th>bytes</th>"
            "<th>shards</th></tr>"]
    for split, info in report["splits"].items():
        rows.append(f"<tr><td>{html.escape(split)}</td><td>{info['num_records']:,}</td>"
                    f"<td>{_bytes(info['num_bytes'])}</td><td>{info['num_shards']}</td></tr>")
    rows.append("</table>")
    counts = [info["num_records"] for info in report["splits"].values()]
    if len(counts) > 1:
        rows.append(bars_svg(list(report["splits"]), counts, "records per split"))
    return "".join(rows)


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
             drift: dict[str, Any] | None) -> str:
    e = html.escape
    desc = f"{feature['dtype']} {feature['shape']}"
    if feature.get("encoding", "values") != "values":
        desc += f", {feature['encoding']}"
    if feature.get("sequence"):
        desc += ", sequence (per step)"
    if feature.get("vocabulary"):
        desc += f", vocabulary of {len(feature['vocabulary'])}"
    flagged = bool(drift and drift["features"].get(name, {}).get("flagged"))
    parts = [f"<h2>{e(name)} <span class='small'>{e(desc)}</span>"
             + (" <span class='flag'>drift</span>" if flagged else "") + "</h2><div class='splits'>"]
    for split, s in feature["splits"].items():
        parts.append(f"<div class='card'><h3>{e(split)}</h3>")
        images = samples.get((name, split))
        if images:
            parts.append(_grid(images, feature))
        parts.append("<div class='row'>" + _stats_table(s, feature) + "<div>")
        if feature.get("categorical") and s.get("top_values"):
            parts.append(_top_plot(s, feature))
        elif s.get("histogram"):
            parts.append(_hist_svg(s["histogram"], f"{name} values"))
        if s.get("components"):
            parts.append(_components(s["components"]))
        if s.get("lengths") and s["lengths"].get("histogram"):
            what = "steps per record" if feature.get("sequence") else "values per record"
            parts.append(_hist_svg(s["lengths"]["histogram"], what))
        parts.append("</div></div></div>")
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
    for name, c in comps.items():
        if c.get("histogram"):
            rows.append(_hist_svg(c["histogram"], name, width=260, height=110))
    return "".join(rows)


def _hist_svg(h: dict[str, Any], title: str, width: int = 420, height: int = 150) -> str:
    note = "" if h["exact"] else " (estimated)"
    if h["kind"] == "values":
        return bars_svg([str(v) for v in h["values"]], h["counts"], title + note, width, height)
    edges = h["edges"]
    labels = [_fmt(edges[0])] + [""] * (len(h["counts"]) - 2) + [_fmt(edges[-1])]
    return bars_svg(labels[: len(h["counts"])], h["counts"], title + note, width, height,
                    gapless=True)


def bars_svg(labels: list[str], counts: list[float], title: str, width: int = 420,
             height: int = 150, gapless: bool = False) -> str:
    """A bar chart as inline SVG: bars, the largest count, and the labels that fit."""
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
             f"<line x1='{left}' y1='{top + plot_h}' x2='{left + plot_w}' y2='{top + plot_h}' "
             "stroke='#999'/>"]
    every = max(1, int(np.ceil(n / max(1, plot_w // 28))))
    for i, (lab, c) in enumerate(zip(labels, counts, strict=False)):
        h = plot_h * (c / peak) if c > 0 else 0
        x = left + i * step + gap / 2
        parts.append(f"<rect x='{x:.1f}' y='{top + plot_h - h:.1f}' width='{max(step - gap, 1):.1f}' "
                     f"height='{h:.1f}' fill='{BAR}'><title>{e(str(lab))}: {_fmt(c)}</title></rect>")
        if lab and (i % every == 0 or gapless):
            short = lab if len(lab) <= 12 else lab[:11] + "…"
            anchor = "start" if gapless and i == 0 else "end" if gapless else "middle"
            tx = x if anchor == "start" else (x + step - gap if gapless else x + (step - gap) / 2)
            parts.append(f"<text x='{tx:.1f}' y='{top + plot_h + 14}' text-anchor='{anchor}'>"
                         f"{e(short)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _grid(images: list[np.ndarray], feature: dict[str, Any]) -> str:
    peak = feature.get("pixel_max") or 255
    tags = "".join(f"<img alt='sample {i}' src='data:image/png;base64,{png_base64(img, peak)}'>"
                   for i, img in enumerate(images))
    return f"<div class='grid'>{tags}</div>"


def png_base64(image: np.ndarray, peak: float) -> str:
    """One decoded image as a PNG (grey levels stretched to 0..255 when the data's range is
    smaller, e.g. digits' 0..16), upscaled with nearest neighbour to at least 64 pixels."""
    from PIL import Image  # noqa: PLC0415

    arr = np.asarray(image, np.float64)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    scale = 255.0 / peak if peak and peak != 255 else 1.0
    pixels = np.clip(np.rint(arr * scale), 0, 255).astype(np.uint8)
    img = Image.fromarray(pixels)  # 2-D: grey (L), [H, W, 3|4]: RGB(A)
    factor = max(1, int(np.ceil(64 / max(img.size))))
    if factor > 1:
        img = img.resize((img.size[0] * factor, img.size[1] * factor), Image.NEAREST)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


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


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)
