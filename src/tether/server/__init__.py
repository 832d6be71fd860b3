"""`tether serve`: the HTTP API over `LocalRuntime` (needs the `server` extra)."""
