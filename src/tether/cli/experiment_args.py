"""The `tether experiment` parser: its forms (TASK, `run`, `report`, `compare`), the options
each takes, and the help of each form (`tether experiment run --help`). The commands
themselves are `cli.experiment`'s.
"""

from __future__ import annotations

import argparse
from typing import Any

from tether.cli.args import COUNT, USD, Parser, nonblank, number, tenant_name
from tether.cli.common import TOOLS_ARGUMENT
from tether.experiment import MATRIX_METRICS

# The forms with words of their own: what the words are, and what the form does.
FORMS = {
    "run": (("SPEC.toml",), "run a spec's variants x tasks x runs (the same --id continues)"),
    "report": (("ID",), "an experiment's report, rebuilt from the store alone"),
    "compare": (("ID", "A", "B"), "variant B against A: the paired difference and a verdict"),
}


def add_experiment_command(sub: Any, store_help: str) -> None:
    from tether.cli import experiment  # its docstring is the command's description

    p = sub.add_parser(
        "experiment",
        help="run a task many times, or compare agents on tasks, and report with intervals",
        description=experiment.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    p.add_argument(
        "words", nargs="*", metavar="TASK | run SPEC | report ID | compare ID A B", default=[]
    )
    forms = {}
    for form, (words, about) in FORMS.items():
        forms[form] = Parser(prog=f"{p.prog} {form}", description=about, add_help=False)
        for word in words:
            forms[form].add_argument(word.lower().replace(".", "_"), metavar=word)
        _add_options(forms[form], store_help, form)
    p.add_argument("-h", "--help", action=FormHelp, forms=forms)
    _add_options(p, store_help, None)


class FormHelp(argparse.Action):
    """`-h`: the help of the form the words before it name (`experiment run --help` is
    run's), else of the whole command."""

    def __init__(self, option_strings: list[str], dest: str, forms: dict[str, Parser]) -> None:
        super().__init__(
            option_strings, argparse.SUPPRESS, nargs=0, help="show this help (of a form: "
            "experiment run|report|compare --help) and exit",
        )  # fmt: skip
        self.forms = forms

    def __call__(self, parser: Any, namespace: Any, values: Any, option: str | None = None) -> None:
        words = getattr(namespace, "words", None) or []
        form = self.forms.get(words[0]) if words else None
        (form or parser).print_help()
        parser.exit()


def _add_options(p: argparse.ArgumentParser, store_help: str, form: str | None) -> None:
    """The options of `form` (None: all of them, in groups, for the command itself)."""
    one = p.add_argument_group("TASK: one task on one agent") if form is None else p
    many = (
        p.add_argument_group("run, report, compare: experiments that compare")
        if form is None
        else p
    )

    def add(forms: str, where: Any, *flags: str, **kwargs: Any) -> None:
        if form is None or form in forms.split():
            where.add_argument(*flags, **kwargs)

    add("run report compare", p, "--store", default=None, help=store_help)
    add("run report compare", p, "--json", action="store_true")
    confidence = number(above=0, below=1)
    add(
        "run report compare",
        p,
        "--confidence",
        type=confidence,
        default=None,
        help="of the intervals (0.95)",
    )
    add("run", p, "--runs", type=COUNT, default=None, help="runs of each task (TASK: 10)")
    add("run", p, "--concurrency", type=COUNT, default=None, help="runs at once (4)")
    add(
        "",
        one,
        "--task",
        type=nonblank,
        default=None,
        help="the task, when it is a subcommand's word",
    )
    add("", one, "--model", default=None, help="as for `tether run`")
    add("", one, "--tools", **TOOLS_ARGUMENT)
    add("", one, "--system", default=None)
    add("", one, "--max-steps", type=COUNT, default=50)
    add("run", many, "--id", default=None, help="run: the experiment's id (continues it)")
    add("run", many, "--max-cost", type=USD, default=None, metavar="USD", help="run: cap")
    add(
        "run",
        many,
        "--tenant",
        type=tenant_name,
        default=None,
        help="run: the tenant whose runs they are, so `tether serve` on this --store shows "
        "them to that tenant's token (the spec's `tenant` otherwise)",
    )
    add(
        "run report compare",
        many,
        "--metric",
        default="pass_rate",
        choices=MATRIX_METRICS,
        help="compare, and the chart: what to compare (pass_rate)",
    )
    add(
        "run report", many, "--chart", default=None, metavar="FILE.svg", help="run, report: a chart"
    )
