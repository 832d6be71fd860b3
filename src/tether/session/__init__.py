"""Running sessions: one turn under its lease (`run`), the same path for a library `Agent`
and for a runtime's worker."""
