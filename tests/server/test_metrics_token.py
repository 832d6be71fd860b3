"""The operator's metrics token shows every tenant's name and spending, so `tether serve`
refuses one that is short enough to guess or that a tenant also holds."""

from __future__ import annotations

import pytest

from tether.errors import ConfigError
from tether.server.auth import Tokens
from tether.server.metrics import check_token

TENANT = "acme-token-0123456789"
OPERATOR = "operator-metrics-token-0123456789"


def test_a_tenants_token_cannot_be_the_metrics_token() -> None:
    tokens = Tokens({"acme": [TENANT]})
    with pytest.raises(ConfigError, match="also a tenant's token"):
        check_token(TENANT, tokens)
    check_token(OPERATOR, tokens)  # its own token is fine
    check_token(None, tokens)  # and none at all: /metrics then names nobody


def test_a_short_metrics_token_is_refused_even_without_tenants() -> None:
    with pytest.raises(ConfigError, match="shorter than 16"):
        check_token("short", None)
    check_token(OPERATOR, None)  # --no-auth: no tenant could hold it
