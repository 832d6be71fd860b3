"""Crash tests: real worker processes killed with SIGKILL, and sessions steered from other processes."""
