"""A chart of an experiment's variants on one metric, each a dot at its value with a bar
for its interval, as SVG written by hand (no plotting library: matplotlib is not among
tether's dependencies). Pure: a string out."""

from __future__ import annotations

import re
from xml.sax.saxutils import escape as _escape

from tether.errors import UsageError
from tether.experiment.records import METRICS
from tether.experiment.report import MatrixReport
from tether.experiment.single import format_for
from tether.experiment.stats import Interval

ROW = 28  # pixels per variant
LABEL = 120  # the names' column
PLOT = 360  # the axis' length
MARGIN = 16
# Characters XML 1.0 does not allow at all (most C0 controls, lone surrogates, U+FFFE/FFFF).
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def escape(text: str) -> str:
    """`text` as SVG character data: markup characters escaped (quotes too), characters XML
    cannot hold dropped. Names in a stored log are whatever its writer put there."""
    return _escape(NOT_XML.sub("", text), {'"': "&quot;", "'": "&apos;"})


def chart_svg(report: MatrixReport, metric: str = "pass_rate") -> str:
    """Each variant on `metric`: the pass rate with its Wilson interval, or a mean with its
    bootstrap interval; a variant without a figure is named and left empty."""
    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    points = {name: _point(report, name, metric) for name in report.plan.variants}
    highs = [p[1].high for p in points.values() if p is not None]
    top = 1.0 if metric == "pass_rate" else max([*highs, 0.0]) * 1.1 or 1.0
    fmt = format_for(metric)
    height = MARGIN * 2 + ROW * (len(points) + 1) + 12
    width = LABEL + PLOT + MARGIN * 2 + 120

    def x(value: float) -> float:
        return LABEL + MARGIN + PLOT * max(0.0, min(value, top)) / top

    title = f"{report.experiment_id} · {metric} · {report.confidence:.0%} intervals"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<text x="{MARGIN}" y="{MARGIN + 4}" font-weight="bold">{escape(title)}</text>',
    ]
    for i, (name, point) in enumerate(points.items()):
        y = MARGIN + ROW * (i + 1) + 8
        parts.append(f'<text x="{MARGIN}" y="{y + 4}">{escape(name)}</text>')
        if point is None:
            parts.append(f'<text x="{x(0):.1f}" y="{y + 4}" fill="#888">no figure</text>')
            continue
        value, interval = point
        parts += [
            f'<line x1="{x(interval.low):.1f}" y1="{y}" x2="{x(interval.high):.1f}" y2="{y}" '
            'stroke="#4a6fa5" stroke-width="3"/>',
            f'<circle cx="{x(value):.1f}" cy="{y}" r="5" fill="#1f3b63"/>',
            f'<text x="{LABEL + PLOT + MARGIN * 2}" y="{y + 4}">{escape(fmt(value))} '
            f"[{escape(fmt(interval.low))}, {escape(fmt(interval.high))}]</text>",
        ]
    axis = height - MARGIN - 6
    parts += [
        f'<line x1="{x(0):.1f}" y1="{axis}" x2="{x(top):.1f}" y2="{axis}" stroke="#888"/>',
        f'<text x="{x(0):.1f}" y="{axis + 14}" fill="#555">{escape(fmt(0))}</text>',
        f'<text x="{x(top):.1f}" y="{axis + 14}" fill="#555" text-anchor="end">'
        f"{escape(fmt(top))}</text>",
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def _point(report: MatrixReport, name: str, metric: str) -> tuple[float, Interval] | None:
    s = report.variant(name)
    if metric == "pass_rate":
        if s.pass_rate is None or s.pass_interval is None:
            return None
        return s.pass_rate, s.pass_interval
    summary = s.metrics[metric]
    return None if summary is None else (summary.mean, summary.interval)
