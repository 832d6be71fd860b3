"""The README is the front door: short, its two commands the ones the Makefile and CI run, and
every link it gives leads to a file of the repository (a docs page the site builds)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
LINKS = re.findall(r"\]\(([^)]+)\)", README)


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.splitlines()) <= 250


def test_its_two_commands_are_the_makefiles_and_ci_runs_the_second() -> None:
    commands = re.search(r"## Two commands\n\n```bash\n(.*?)```", README, re.S)
    assert commands is not None
    targets = [line.split("#")[0].split() for line in commands.group(1).splitlines()]
    assert targets == [["make", "demo"], ["make", "test"]]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo: ", makefile, re.M) and re.search(r"^test: ", makefile, re.M)
    assert re.search(r"^make test$", (ROOT / ".ci/run").read_text(encoding="utf-8"), re.M)


def test_every_link_leads_to_a_file_and_every_docs_page_to_the_site() -> None:
    relative = [link for link in LINKS if "://" not in link]
    assert len(relative) >= 20, "the table of what it does links into the docs"
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for link in relative:
        path = link.split("#")[0]
        assert (ROOT / path).is_file(), f"README links to {link}, which is not a file"
        if path.startswith("docs/"):
            page = path.removeprefix("docs/")
            assert re.search(rf"^\s+- (.+: )?{re.escape(page)}$", nav, re.M), f"{page} not in nav"
