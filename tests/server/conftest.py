from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.support import Server, serve


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One `tether serve` (4 in-process workers) shared by a module's tests."""
    directory: Path = tmp_path_factory.mktemp("serve")
    with serve(directory, "--workers", "4") as running:
        yield running
