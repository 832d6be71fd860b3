"""The model catalog: look-ups by snapshot and router names, registration, and cost."""

from __future__ import annotations

import pytest

from tether.messages import Usage
from tether.providers import catalog


def test_dated_snapshots_and_router_names_find_their_family() -> None:
    assert catalog.lookup("gpt-4.1-2025-04-14") is catalog.lookup("gpt-4.1")
    assert catalog.lookup("claude-sonnet-4-5-20250929") is catalog.lookup("claude-sonnet-4-5")
    assert catalog.lookup("anthropic/claude-sonnet-4.5") is catalog.lookup("claude-sonnet-4-5")
    assert catalog.lookup("openai/gpt-4o-mini") is catalog.lookup("gpt-4o-mini")
    assert catalog.lookup("qwen3:8b") is None


def test_cost_prices_plain_cached_and_output_tokens_apart() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=100_000,
        cache_read_tokens=400_000,
        cache_write_tokens=100_000,
    )
    # 500k plain at 3, 400k read at 0.3, 100k write at 3.75, 100k out at 15
    assert catalog.cost("claude-sonnet-4-5", usage) == pytest.approx(1.5 + 0.12 + 0.375 + 1.5)


def test_unknown_model_or_price_costs_none() -> None:
    assert catalog.cost("no-such-model", Usage(10, 10)) is None
    catalog.register(catalog.ModelInfo("window-only-model", context_window=8192))
    assert catalog.cost("window-only-model", Usage(10, 10)) is None


def test_registered_models_are_priced_and_cache_defaults_to_input_price() -> None:
    catalog.register(catalog.ModelInfo("my-local-model", 32_768, 4096, 0.5, 1.0))
    info = catalog.lookup("my-local-model-2025-01-01")
    assert info is not None and info.context_window == 32_768
    assert catalog.cost(
        "my-local-model", Usage(1_000_000, 1_000_000, cache_read_tokens=500_000)
    ) == pytest.approx(1.5)
