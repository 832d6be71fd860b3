"""Event stores: memory (tests), SQLite (the embedded default)."""

from tether.store.base import SessionInfo, Store
from tether.store.memory import MemoryStore
from tether.store.open import DEFAULT_STORE_URL, open_store
from tether.store.sqlite import SQLiteStore

__all__ = ["DEFAULT_STORE_URL", "MemoryStore", "SQLiteStore", "SessionInfo", "Store", "open_store"]
