"""What the experiment reports print for people: `render_matrix` (each variant's pass rate
and figures, with intervals) and `render_comparison` (a difference and its verdict).
Strings only; the chart is `chart`'s."""

from __future__ import annotations

from tether.experiment.report import Comparison, MatrixReport
from tether.experiment.single import format_for, summary_text

FIGURES = ("score", "steps", "tokens", "cost_usd", "seconds")
FEW_PAIRS = 10


def render_matrix(report: MatrixReport) -> str:
    plan = report.plan
    lines = [
        f"experiment {report.experiment_id} · {len(plan.variants)} variant(s) × "
        f"{len(plan.tasks)} task(s) × {plan.runs} run(s) · {report.confidence:.0%} intervals"
    ]
    for name in plan.variants:
        s = report.variant(name)
        if not s.runs:
            lines.append(f"{name:<10}no finished run")
            continue
        share = s.pass_interval
        if share is None:  # no run's check was run (`MatrixRun.checked`)
            lines.append(f"{name:<10}passed   unknown: {s.unchecked} run(s) not checked")
        else:
            lines.append(
                f"{name:<10}passed   {s.passed:>5}/{s.runs - s.unchecked:<5}"
                f"{s.passed / (s.runs - s.unchecked):>6.0%}   [{share.low:.0%}, {share.high:.0%}]"
                + (f"   ({s.unchecked} not checked)" if s.unchecked else "")
            )
        ended = " · ".join(f"{reason or '-'} {n}" for reason, n in s.outcomes.items())
        lines.append(f"{'':<10}ended    {ended}")
        if s.check_errors:
            lines.append(f"{'':<10}checks   {s.check_errors} raised (not passed; see --json)")
        for metric in FIGURES:
            lines.append(f"{'':<10}{metric:<9}{summary_text(metric, s.metrics[metric], s.runs)}")
    if report.aside:
        ids = " ".join(r.session_id for r in report.aside)
        lines.append(f"aside     {len(report.aside)} abandoned or duplicate run(s): {ids}")
    if report.ran:
        lines.append(f"ran       {report.ran} run(s) now, {len(report.runs)} counted in all")
    note = report.stop_note()
    if note is not None:
        lines.append(note)
    return "\n".join(lines)


def render_comparison(c: Comparison) -> str:
    fmt = format_for(c.metric)
    sign = "+" if c.difference >= 0 else "-"
    low, high = c.interval.low, c.interval.high
    lines = [
        f"{c.a} against {c.b} on {c.metric} · {c.pairs} pair(s) by ({c.paired_by}, repeat) · "
        f"{c.confidence:.0%} paired bootstrap",
        f"{c.a} {fmt(c.a_mean)}   {c.b} {fmt(c.b_mean)}   difference {sign}"
        f"{fmt(abs(c.difference))}   [{_signed(fmt, low)}, {_signed(fmt, high)}]",
        f"verdict  {c.verdict} ({c.a} against {c.b})",
    ]
    if c.pairs < FEW_PAIRS:
        lines.append(
            f"few pairs: below about {FEW_PAIRS} a bootstrap interval is too narrow "
            "(pairs that all agree give no width at all); run more"
        )
    if c.unpaired:
        lines.append(f"left out {c.unpaired} cell(s) with a figure on one side only")
    return "\n".join(lines)


def _signed(fmt: object, value: float) -> str:
    assert callable(fmt)
    text: str = fmt(abs(value))
    return f"{'-' if value < 0 else '+'}{text}"
