"""`tether experiment run --tenant T` (and a spec's `tenant`) against the store a real
`tether serve` uses: the experiment is T's at `/v1/experiments` and in the web view
(Chromium), and no other tenant's; a name no tokens file could give a tenant is refused in
one line before anything runs. On SQLite, and on PostgreSQL with TETHER_TEST_POSTGRES_URL."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from experiment.test_cli import env
from postgres.conftest import pg_url  # noqa: F401  # the PostgreSQL schema of a test
from server.support import ACME, GLOBEX, Server, serve
from server.test_web_view import WAIT_MS, browser, give_token

__all__ = ["browser"]

SPEC = """
runs = 2
{tenant}

[variants.a]
model = "python:experiment.fixtures:model"
tools = ["experiment.fixtures:reliable"]

[variants.b]
model = "python:experiment.fixtures:model"
tools = ["experiment.fixtures:unreliable"]

[[tasks]]
name = "fetch"
prompt = "Fetch the answer."
check = "experiment.fixtures:said_ok"
"""


def spec(directory: Path, tenant: str | None = None) -> Path:
    path = directory / f"spec-{tenant or 'none'}.toml"
    path.write_text(SPEC.format(tenant="" if tenant is None else f'tenant = "{tenant}"'))
    return path


def run(store: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`tether experiment run ...` as its own process, on the server's store."""
    command = [sys.executable, "-m", "tether", "experiment", "run", *args, "--store", store]
    return subprocess.run(command, cwd=cwd, env=env(), capture_output=True, text=True, timeout=120)


async def listed(server: Server, token: str) -> dict[str, int]:
    """The experiments `token`'s tenant sees: id -> runs."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        got = await client.get("/v1/experiments", headers={"authorization": f"Bearer {token}"})
    assert got.status_code == 200, got.text
    return {e["experiment_id"]: e["runs"] for e in got.json()["experiments"]}


async def report_status(server: Server, token: str, experiment_id: str) -> int:
    async with httpx.AsyncClient(base_url=server.url) as client:
        got = await client.get(
            f"/v1/experiments/{experiment_id}", headers={"authorization": f"Bearer {token}"}
        )
    return got.status_code


async def check_tenancy(server: Server, directory: Path) -> None:
    done = run(
        server.store, str(spec(directory)), "--tenant", "acme", "--id", "ours", cwd=directory
    )
    assert done.returncode == 0, done.stderr
    # The spec's own field, with no flag: globex's.
    done = run(server.store, str(spec(directory, "globex")), "--id", "theirs", cwd=directory)
    assert done.returncode == 0, done.stderr
    # The flag wins over the spec's field.
    done = run(
        server.store, str(spec(directory, "globex")), "--tenant", "acme", "--id", "moved",
        cwd=directory,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    assert await listed(server, ACME) == {"ours": 4, "moved": 4}
    assert await listed(server, GLOBEX) == {"theirs": 4}
    assert await report_status(server, ACME, "ours") == 200
    assert await report_status(server, GLOBEX, "ours") == 404
    assert await report_status(server, ACME, "theirs") == 404


async def test_a_tenants_cli_experiment_is_that_tenants_alone_on_sqlite(tmp_path: Path) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        await check_tenancy(server, tmp_path)


async def test_a_tenants_cli_experiment_is_that_tenants_alone_on_postgres(
    tmp_path: Path,
    pg_url: str,  # noqa: F811  # the fixture imported above
) -> None:
    with serve(tmp_path, "--workers", "0", store=pg_url) as server:
        await check_tenancy(server, tmp_path)


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("flag", "argument --tenant: tenant name 'no way' must be 1-64 of A-Z a-z 0-9 _ . -"),
        ("spec", "tenant: tenant name 'no way' must be 1-64 of A-Z a-z 0-9 _ . -"),
    ],
)
def test_a_name_no_tenant_could_have_is_refused_in_one_line_before_any_run(
    tmp_path: Path, where: str, said: str
) -> None:
    path = spec(tmp_path, "no way" if where == "spec" else None)
    args = ("--tenant", "no way") if where == "flag" else ()
    done = run(f"sqlite:///{tmp_path / 'e.db'}", str(path), *args, cwd=tmp_path)
    assert done.returncode == 2 if where == "flag" else done.returncode != 0
    assert said in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "e.db").exists()  # nothing ran, no store was made


def test_tenant_is_for_run_alone(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "experiment", "report", "x", "--tenant", "acme"],
        cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--tenant" in done.stderr


async def test_the_web_view_shows_a_tenants_cli_experiment_to_that_tenant(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "0") as server:
        for tenant, experiment_id in (("acme", "ours"), ("globex", "theirs")):
            done = await asyncio.to_thread(
                run, server.store, str(spec(tmp_path)), "--tenant", tenant, "--id", experiment_id,
                cwd=tmp_path,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
        for token, shown, hidden in ((ACME, "ours", "theirs"), (GLOBEX, "theirs", "ours")):
            page = await browser.new_page()
            await page.goto(f"{server.url}/ui")
            await give_token(page, token)
            await page.click("#to-experiments")
            row = page.locator(f'#experiments tr[data-experiment="{shown}"]')
            await expect(row).to_contain_text("a, b", timeout=WAIT_MS)
            await expect(row).to_contain_text("4")
            assert await page.locator(f'#experiments tr[data-experiment="{hidden}"]').count() == 0
            await row.click()
            await expect(page.locator("#runs tr")).to_have_count(4, timeout=WAIT_MS)
            await page.close()
