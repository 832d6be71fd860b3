"""Process-wide caches bounded by bytes as well as entries (`ByteLRU`), and `approx_size`,
the cheap estimate of a JSON value's size they are charged with. Pure: no I/O, no clock.

A cache counted only in entries holds whatever its entries hold: one tenant's large inputs,
kept in several such caches, once took a server from 55 to 655 MiB. Every cache a process
keeps for all its tenants is one of these, charged the size of what it holds."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# What a small value costs beside its text (object header, a dict slot, a list slot): an
# estimate, so that a list of empty lists is not counted as free.
ITEM_OVERHEAD = 64


def approx_size(value: object, stop_at: int | None = None) -> int:
    """About how many bytes a decoded JSON value holds: its strings' lengths and a fixed
    overhead per item, without encoding it. Walks at most until the count passes
    `stop_at` (then returns what it has counted, more than `stop_at`)."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        total += ITEM_OVERHEAD
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += sum(len(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        if stop_at is not None and total > stop_at:
            break
    return total


class ByteLRU(Generic[K, V]):
    """A least-recently-used map holding at most `entries` items and `budget` bytes (each
    item charged the size it is put with). An item larger than `largest` (by default an
    eighth of the budget) is not kept at all: one item never evicts most of the others."""

    def __init__(self, entries: int, budget: int, largest: int | None = None) -> None:
        if entries < 1 or budget < 1:
            raise ValueError(f"a cache needs room: {entries} entries, {budget} bytes")
        self.entries = entries
        self.budget = budget
        self.largest = budget // 8 if largest is None else largest
        self.bytes = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._items))

    def get(self, key: K) -> V | None:
        """The value, marked as the most recently used; None when not held."""
        found = self._items.get(key)
        if found is None:
            return None
        self._items.move_to_end(key)
        return found[0]

    def peek(self, key: K) -> V | None:
        """The value, without marking it used."""
        found = self._items.get(key)
        return None if found is None else found[0]

    def put(self, key: K, value: V, size: int) -> bool:
        """Keep `value` as the most recently used, charged `size` bytes, dropping the least
        recently used past either bound. False: too large to keep (and not kept)."""
        self.pop(key)
        if size > self.largest:
            return False
        self._items[key] = (value, size)
        self.bytes += size
        while len(self._items) > self.entries or self.bytes > self.budget:
            _, (_, dropped) = self._items.popitem(last=False)
            self.bytes -= dropped
        return True

    def resize(self, key: K, size: int) -> None:
        """Charge a held value its new size (it grew in place), dropping what no longer
        fits; the value itself is dropped when it has grown past `largest`."""
        found = self._items.get(key)
        if found is not None:
            self.put(key, found[0], size)

    def pop(self, key: K) -> V | None:
        found = self._items.pop(key, None)
        if found is None:
            return None
        self.bytes -= found[1]
        return found[0]
