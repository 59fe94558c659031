"""The SQLite stores pass the store contract, on a file and in a private in-memory database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from opsrun.stores.sqlite import SqliteStores
from opsrun.testing import StoreContract


class TestSqliteStores(StoreContract):
    @pytest.fixture
    def stores(self, tmp_path: Path) -> Iterator[SqliteStores]:
        with SqliteStores(tmp_path / "chat.db") as stores:
            yield stores


class TestSqliteStoresInMemory(StoreContract):
    @pytest.fixture
    def stores(self) -> Iterator[SqliteStores]:
        with SqliteStores(":memory:") as stores:
            yield stores
