"""`ByteLRU` holds at most its entries and its bytes, least recently used dropped first, and
keeps nothing larger than its largest; `approx_size` counts text and items without encoding."""

from __future__ import annotations

import pytest

from tether.bounded import ITEM_OVERHEAD, ByteLRU, approx_size


def test_the_byte_budget_drops_the_least_recently_used() -> None:
    cache: ByteLRU[str, str] = ByteLRU(entries=100, budget=1_000, largest=1_000)
    for name in "abcd":
        cache.put(name, name, 300)
    assert list(cache) == ["b", "c", "d"] and cache.bytes == 900
    assert cache.get("b") == "b"  # used: now the most recent
    cache.put("e", "e", 300)
    assert list(cache) == ["d", "b", "e"] and cache.bytes == 900


def test_the_entry_bound_holds_beside_the_bytes() -> None:
    cache: ByteLRU[int, int] = ByteLRU(entries=3, budget=1_000_000)
    for n in range(10):
        cache.put(n, n, 1)
    assert list(cache) == [7, 8, 9] and cache.bytes == 3


def test_an_item_past_the_largest_is_not_kept_and_evicts_nothing() -> None:
    cache: ByteLRU[str, str] = ByteLRU(entries=10, budget=800)  # largest: 100
    cache.put("small", "s", 100)
    assert cache.put("huge", "h", 101) is False
    assert "huge" not in cache and list(cache) == ["small"] and cache.bytes == 100


def test_putting_a_key_again_or_resizing_it_charges_its_new_size() -> None:
    cache: ByteLRU[str, str] = ByteLRU(entries=10, budget=1_000, largest=1_000)
    cache.put("a", "a", 100)
    cache.put("a", "a2", 200)
    assert cache.bytes == 200 and cache.peek("a") == "a2"
    cache.resize("a", 50)
    assert cache.bytes == 50
    assert cache.pop("a") == "a2" and cache.bytes == 0 and len(cache) == 0


def test_a_cache_without_room_is_refused() -> None:
    with pytest.raises(ValueError, match="needs room"):
        ByteLRU(entries=0, budget=10)


def test_approx_size_counts_strings_and_items_and_stops_early() -> None:
    assert approx_size("x" * 1_000) == 1_000 + ITEM_OVERHEAD
    empties = [[] for _ in range(1_000)]
    assert approx_size(empties) == 1_001 * ITEM_OVERHEAD  # small items are not free
    assert approx_size({"key": "value"}) == len("key") + len("value") + 2 * ITEM_OVERHEAD
    stopped = approx_size([[] for _ in range(100_000)], stop_at=10_000)
    assert 10_000 < stopped <= 10_000 + ITEM_OVERHEAD
