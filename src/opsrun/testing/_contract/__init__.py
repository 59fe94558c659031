"""The store contract: one test suite that every implementation of the store ports passes.

Subclass :class:`StoreContract` in a test module, name the subclass ``Test…`` and give it
a ``stores`` fixture that returns (or yields) the bundle under test::

    class TestMyStores(StoreContract):
        @pytest.fixture
        def stores(self, tmp_path):
            with MyStores(tmp_path / "db") as stores:
                yield stores

Every test uses ids of its own, so the fixture may hand several tests one database. The
exception is pruning: the retention tests delete finished runs that started before 2001,
in every chat (the other tests' runs start in 2026), so do not share the database with
anything that keeps such runs. The tests are async and marked ``anyio``: they run on the
backends of the ``anyio_backend`` fixture (asyncio unless your conftest parametrizes it).
"""

from __future__ import annotations

from ._branches import BranchContract
from ._chats import ChatContract
from ._follow import FollowContract
from ._payloads import PayloadContract
from ._records import RecordContract
from ._retention import RetentionContract
from ._runs import RunContract

__all__ = ["StoreContract"]


class StoreContract(
    RecordContract,
    ChatContract,
    RunContract,
    RetentionContract,
    FollowContract,
    BranchContract,
    PayloadContract,
):
    """The guarantees of every store port; subclass it with a ``stores`` fixture.

    Each test's docstring states the guarantee it checks. Override
    :meth:`archived_versions` when the tests should read the archive another way than
    ``await archive.versions(key, tag)``.
    """
