"""The model catalog: context window, output limit and prices of well-known models, and the
cost of a call computed from them. Users register more with `register`. A model whose price is
not known costs None, never a guess. Prices are USD per million tokens, as published in 2025.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from tether.messages import Usage


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What tether knows of a model. Cache prices default to the input price when None."""

    name: str
    context_window: int | None = None
    max_output_tokens: int | None = None
    input_per_mtok: float | None = None
    output_per_mtok: float | None = None
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    @property
    def priced(self) -> bool:
        return self.input_per_mtok is not None and self.output_per_mtok is not None


_BUILTIN = (
    # Anthropic: cache writes (5-minute) cost 1.25x input, cache reads 0.1x.
    ModelInfo("claude-opus-4-5", 200_000, 64_000, 5.0, 25.0, 0.5, 6.25),
    ModelInfo("claude-opus-4-1", 200_000, 32_000, 15.0, 75.0, 1.5, 18.75),
    ModelInfo("claude-opus-4-0", 200_000, 32_000, 15.0, 75.0, 1.5, 18.75),
    ModelInfo("claude-sonnet-4-5", 200_000, 64_000, 3.0, 15.0, 0.3, 3.75),
    ModelInfo("claude-sonnet-4-0", 200_000, 64_000, 3.0, 15.0, 0.3, 3.75),
    ModelInfo("claude-haiku-4-5", 200_000, 64_000, 1.0, 5.0, 0.1, 1.25),
    ModelInfo("claude-3-5-haiku", 200_000, 8_192, 0.8, 4.0, 0.08, 1.0),
    # OpenAI: cached input is billed at the cache-read price; there is no write surcharge.
    ModelInfo("gpt-5", 400_000, 128_000, 1.25, 10.0, 0.125, None),
    ModelInfo("gpt-5-mini", 400_000, 128_000, 0.25, 2.0, 0.025, None),
    ModelInfo("gpt-5-nano", 400_000, 128_000, 0.05, 0.4, 0.005, None),
    ModelInfo("gpt-4.1", 1_047_576, 32_768, 2.0, 8.0, 0.5, None),
    ModelInfo("gpt-4.1-mini", 1_047_576, 32_768, 0.4, 1.6, 0.1, None),
    ModelInfo("gpt-4.1-nano", 1_047_576, 32_768, 0.1, 0.4, 0.025, None),
    ModelInfo("gpt-4o", 128_000, 16_384, 2.5, 10.0, 1.25, None),
    ModelInfo("gpt-4o-mini", 128_000, 16_384, 0.15, 0.6, 0.075, None),
    ModelInfo("o3", 200_000, 100_000, 2.0, 8.0, 0.5, None),
    ModelInfo("o4-mini", 200_000, 100_000, 1.1, 4.4, 0.275, None),
)

_models: dict[str, ModelInfo] = {m.name: m for m in _BUILTIN}

# Dated snapshots ("gpt-4.1-2025-04-14", "claude-sonnet-4-5-20250929") share their family's
# entry; so do "-latest" aliases.
_SNAPSHOT = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")


def register(info: ModelInfo) -> None:
    """Add or replace a model; later lookups of that name (and its snapshots) find it."""
    _models[info.name] = info


def names() -> list[str]:
    """The names of the models the catalog knows, sorted."""
    return sorted(_models)


def lookup(name: str) -> ModelInfo | None:
    """Find a model by exact name, then without a date suffix, then without a router prefix
    ("anthropic/claude-sonnet-4.5" on OpenRouter spells versions with a dot)."""
    for candidate in _candidates(name):
        info = _models.get(candidate)
        if info is not None:
            return info
    return None


@functools.lru_cache(maxsize=256)
def _candidates(name: str) -> tuple[str, ...]:
    out = [name, _SNAPSHOT.sub("", name)]
    if "/" in name:
        bare = name.rsplit("/", 1)[1]
        out += [bare, _SNAPSHOT.sub("", bare), bare.replace(".", "-")]
    return tuple(out)


def cost(name: str, usage: Usage) -> float | None:
    """USD for one call, or None when the model or its price is unknown. Cache tokens are
    counted inside `input_tokens` (see `Usage`) and priced at their own rate."""
    info = lookup(name)
    if info is None or info.input_per_mtok is None or info.output_per_mtok is None:
        return None
    read_price = info.cache_read_per_mtok
    write_price = info.cache_write_per_mtok
    plain = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
    total = (
        plain * info.input_per_mtok
        + usage.cache_read_tokens * (info.input_per_mtok if read_price is None else read_price)
        + usage.cache_write_tokens * (info.input_per_mtok if write_price is None else write_price)
        + usage.output_tokens * info.output_per_mtok
    )
    return total / 1_000_000
