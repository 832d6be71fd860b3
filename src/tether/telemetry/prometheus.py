"""The metrics registry as Prometheus text (0.0.4), for `GET /metrics`.

Owns what each reader may see: models and tools (a tenant's choice) and tenants are named
only to the operator (`names`); anyone else gets totals over them. Outcomes, stop reasons,
states and verdicts name nobody and always stay. Not the HTTP side (`server/metrics.py`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from tether.scheduler.figures import _escape
from tether.telemetry import metrics
from tether.telemetry.census import census
from tether.telemetry.metrics import Histogram, Labels, Registry


def _labels(names: Sequence[str], values: Labels) -> str:
    return ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))


def _merge(counter: Mapping[Labels, float], keep: Sequence[int]) -> dict[Labels, float]:
    out: defaultdict[Labels, float] = defaultdict(float)
    for labels, value in counter.items():
        out[tuple(labels[i] for i in keep)] += value
    return dict(out)


def _summed(h: Histogram) -> Histogram:
    out = Histogram(h.buckets)
    for labels, counts in h.counts.items():
        mine = out.counts.setdefault((), [0] * len(counts))
        for i, c in enumerate(counts):
            mine[i] += c
        out.sums[()] += h.sums[labels]
    return out


class _Text:
    """The lines of one rendering, a family at a time."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> str:
        self.lines.append(f"# HELP tether_{name} {help_text}")
        self.lines.append(f"# TYPE tether_{name} {kind}")
        return f"tether_{name}"

    def samples(
        self,
        name: str,
        kind: str,
        help_text: str,
        data: Mapping[Labels, float],
        label_names: Sequence[str],
    ) -> None:
        metric = self.family(name, kind, help_text)
        for labels, value in sorted(data.items()):
            inner = _labels(label_names, labels)
            self.lines.append(f"{metric}{{{inner}}} {value:g}" if inner else f"{metric} {value:g}")

    def histogram(
        self, name: str, help_text: str, h: Histogram, label_names: Sequence[str]
    ) -> None:
        metric = self.family(name, "histogram", help_text)
        for labels in sorted(h.counts):
            counts = h.counts[labels]
            inner = _labels(label_names, labels)
            sep = "," if inner else ""
            total = 0
            for bound, count in zip((*h.buckets, float("inf")), counts, strict=True):
                total += count
                le = "+Inf" if bound == float("inf") else f"{bound:g}"
                self.lines.append(f'{metric}_bucket{{{inner}{sep}le="{le}"}} {total}')
            wrap = f"{{{inner}}}" if inner else ""
            self.lines.append(f"{metric}_sum{wrap} {h.sums[labels]:g}")
            self.lines.append(f"{metric}_count{wrap} {total}")


def render(registry: Registry | None = None, *, names: bool = False) -> list[str]:
    """The series as Prometheus text lines (of the process's registry unless given one).
    Without `names`, models, tools and tenants are summed away; with them (the operator),
    tokens and cost are by tenant and model."""
    registry = metrics.METRICS if registry is None else registry
    text = _Text()
    _models(text, registry, names)
    _tools_and_turns(text, registry, names)
    _workers(text, registry)
    return text.lines


def _models(text: _Text, r: Registry, names: bool) -> None:
    model = ("model",) if names else ()
    for name, help_text, h in (
        ("model_call_seconds", "model call latency, retries included", r.model_seconds),
        ("model_first_token_seconds", "time to a streamed answer's first token, from the "
         "request handed to the gateway", r.first_token_seconds),
    ):  # fmt: skip
        text.histogram(name, help_text, h if names else _summed(h), model)
    if names:
        text.samples("tokens_total", "counter", "tokens by tenant, model and kind", r.tokens,
                     ("tenant", "model", "kind"))  # fmt: skip
        text.samples("cost_usd_total", "counter", "priced cost by tenant and model", r.cost_usd,
                     ("tenant", "model"))  # fmt: skip
        text.samples("model_failures_total", "counter", "model calls that failed, by model and "
                     "error class", r.model_failures, ("model", "error_class"))  # fmt: skip
    else:
        text.samples("tokens_total", "counter", "tokens by kind", _merge(r.tokens, (2,)),
                     ("kind",))  # fmt: skip
        text.samples("cost_usd_total", "counter", "priced cost", _merge(r.cost_usd, ()), ())
        text.samples("model_failures_total", "counter", "model calls that failed, by error class",
                     _merge(r.model_failures, (1,)), ("error_class",))  # fmt: skip


def _tools_and_turns(text: _Text, r: Registry, names: bool) -> None:
    tool_seconds = r.tool_seconds if names else _summed(r.tool_seconds)
    text.histogram("tool_call_seconds", "tool call duration", tool_seconds,
                   ("tool",) if names else ())  # fmt: skip
    if names:
        text.samples("tool_calls_total", "counter", "tool calls by tool and outcome",
                     r.tool_calls, ("tool", "outcome"))  # fmt: skip
    else:
        text.samples("tool_calls_total", "counter", "tool calls by outcome",
                     _merge(r.tool_calls, (1,)), ("outcome",))  # fmt: skip
    text.samples("turns_total", "counter", "turns ended, by stop reason", r.turns,
                 ("stop_reason",))  # fmt: skip
    text.samples("sessions_ended_total", "counter", "sessions ended, by outcome",
                 r.sessions_ended, ("outcome",))  # fmt: skip


def _workers(text: _Text, r: Registry) -> None:
    now = census(r.workers)
    text.samples("worker_slots", "gauge", "this process's worker slots, used and free",
                 {("used",): now.used, ("free",): now.slots - now.used}, ("slot",))  # fmt: skip
    text.samples("worker_leases_held", "gauge", "session leases this process's workers hold",
                 {(): now.leases}, ())  # fmt: skip
    text.samples("worker_sessions", "gauge", "sessions this process's workers hold, by state",
                 {(state,): n for state, n in now.states.items()}, ("state",))  # fmt: skip
    text.samples("takeovers_total", "counter", "sessions claimed after their worker died, by "
                 "verdict (forgiven, struck, poisoned)", r.takeovers, ("verdict",))  # fmt: skip
    text.samples("parks_total", "counter", "sessions put aside, by reason (parked, backoff: "
                 "deferred; poisoned: ended)", r.parks, ("reason",))  # fmt: skip
