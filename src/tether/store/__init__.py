"""Event stores: memory (tests), SQLite (the embedded default)."""

from tether.store.base import DEFAULT_STORE_URL, SessionInfo, Store, open_store
from tether.store.memory import MemoryStore
from tether.store.sqlite import SQLiteStore

__all__ = ["DEFAULT_STORE_URL", "MemoryStore", "SQLiteStore", "SessionInfo", "Store", "open_store"]
