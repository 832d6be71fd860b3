"""Two tenants' models of one name on a real `tether serve` and `tether worker` sharing a
PostgreSQL store: each session reaches only its own backend (the checks are in
`tests/server/test_tenancy.py`)."""

from __future__ import annotations

from pathlib import Path

from server.test_tenancy import check_one_name_two_endpoints, check_two_python_models_one_name


async def test_one_model_name_on_two_endpoints_on_postgres(tmp_path: Path, pg_url: str) -> None:
    await check_one_name_two_endpoints(tmp_path, pg_url)


async def test_two_python_models_with_one_name_on_postgres(tmp_path: Path, pg_url: str) -> None:
    await check_two_python_models_one_name(tmp_path, pg_url)
