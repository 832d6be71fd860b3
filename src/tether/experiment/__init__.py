"""Experiments: a task run many times, each run its own session, reported with intervals.

A model's answers vary from run to run, so one run says little about a prompt, a model or a
set of tools. `run_experiment` runs one task on one agent many times (`Report`);
`run_matrix` runs tasks with checks on several agents (variants), tagged so it can be
continued, and `MatrixReport.compare` says whether one variant is better than another
beyond the noise (a paired bootstrap). Every run is a session in the agents' store, with
its agent's `metadata` (`{"tenant": "acme"}` lets that tenant see it in `tether serve`).
"""

from __future__ import annotations

from tether.experiment.chart import chart_svg
from tether.experiment.matrix import FindCheck, matrix_report, read_matrix, run_matrix
from tether.experiment.plan import INCOMPLETE, Cell, Check, Plan, Task
from tether.experiment.records import METRICS as MATRIX_METRICS
from tether.experiment.records import MatrixRun
from tether.experiment.render import render_comparison, render_matrix
from tether.experiment.report import Comparison, MatrixReport, VariantSummary, Verdict
from tether.experiment.single import METRICS, Report, RunRecord, render_report, run_experiment
from tether.experiment.stats import (
    BOOTSTRAP_RESAMPLES,
    Interval,
    Summary,
    bootstrap_mean,
    paired_bootstrap,
    wilson,
)

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "INCOMPLETE",
    "MATRIX_METRICS",
    "METRICS",
    "Cell",
    "Check",
    "Comparison",
    "FindCheck",
    "Interval",
    "MatrixReport",
    "MatrixRun",
    "Plan",
    "Report",
    "RunRecord",
    "Summary",
    "Task",
    "VariantSummary",
    "Verdict",
    "bootstrap_mean",
    "chart_svg",
    "matrix_report",
    "paired_bootstrap",
    "read_matrix",
    "render_comparison",
    "render_matrix",
    "render_report",
    "run_experiment",
    "run_matrix",
    "wilson",
]
