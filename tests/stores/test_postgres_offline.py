"""What the PostgreSQL stores do without a server: options and connection strings are
checked when the object is made, an unreachable server is ``store_unavailable``, and the
example says how to run it."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from opsrun.errors import ConfigError, StoreError
from opsrun.stores.postgres import PostgresStores

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat_postgres.py"


@pytest.mark.anyio
async def test_an_unreachable_server_is_store_unavailable() -> None:
    stores = PostgresStores("postgresql://postgres@127.0.0.1:1/test", timeout=2)
    with pytest.raises(StoreError) as unavailable:
        await stores.open()
    assert unavailable.value.code == "store_unavailable"
    assert "127.0.0.1" in unavailable.value.message


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("schema", ""),
        ("schema", "s" * 64),
        ("schema", "chat\ud800"),  # a lone surrogate: no UTF-8 form
        ("min_size", -1),
        ("max_size", 0),
        ("max_branch_holds", 0),
        ("timeout", 0),
        ("timeout", float("inf")),
        ("timeout", float("nan")),
        ("branch_keepalive_seconds", 0),
    ],
)
def test_bad_options_are_config_errors(option: str, value: object) -> None:
    with pytest.raises(ConfigError) as bad:
        PostgresStores("postgresql://localhost/test", **{option: value})  # type: ignore[arg-type]
    assert bad.value.details["field"] == option


def test_a_bad_dsn_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as bad:
        PostgresStores("host=localhost port")
    assert bad.value.details["field"] == "dsn"


def test_the_repr_names_the_server_but_never_the_password() -> None:
    stores = PostgresStores("postgresql://me:secret@db.example:6543/chat", schema="app")
    assert repr(stores) == "PostgresStores('host=db.example port=6543 dbname=chat', schema='app')"


def test_the_chat_postgres_example_without_a_server_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPSRUN_POSTGRES_DSN", raising=False)
    monkeypatch.setattr(sys, "argv", ["chat_postgres.py"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("Set OPSRUN_POSTGRES_DSN")
