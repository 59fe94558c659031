"""The ``run`` variable of templates has exactly the keys the template docs list."""

from __future__ import annotations

import re
from pathlib import Path

from opsrun.model import Trigger
from opsrun.operations import RunMeta

DOCS = Path(__file__).resolve().parents[2] / "docs" / "templates.md"


def test_the_documented_run_keys_are_the_keys_templates_get() -> None:
    row = next(
        line
        for line in DOCS.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `run` |")
    )
    documented = set(re.findall(r"`(\w+)`", row.split("|")[2]))
    meta = RunMeta(
        run_id="r",
        trigger=Trigger.GENERATE,
        chat_id="c",
        branch_id="main",
        user_message_id="m",
        profile_id="p",
        session_key=None,
    )
    assert documented == {*meta.as_dict(), "hook"}
