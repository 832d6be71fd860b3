"""The `tether` command line: `main` parses and dispatches; one module per group of
subcommands (`main`: run, demo, sessions ls/show/events/blob; `steer`: approve, deny,
interrupt, cancel, resume, send; `chat`; `experiment`; `serve`: serve and worker; `db`), the
live view (`live`), Ctrl-C (`interrupts`), and what they share (`common`). A thin adapter
over what a library user calls."""

from tether.cli.main import main

__all__ = ["main"]
