"""Secrets never reach a stored record or an event, whatever path they take into a run."""

from __future__ import annotations

from typing import Any

import pytest

from _support import make_runner, session_artifacts
from opsrun.errors import ProviderError
from opsrun.kinds import builtin_kinds
from opsrun.model import (
    Hook,
    OperationConfig,
    OperationDefinition,
    OperationProfile,
    ProfileOperation,
    RunRequest,
    RunResult,
    Trigger,
)
from opsrun.operations import OperationCatalog
from opsrun.ports import LlmRequest
from opsrun.providers import ProviderRegistry
from opsrun.stores import InMemoryStores
from opsrun.testing import FunctionProvider, ScriptedMainLlm, StaticCredentials

pytestmark = pytest.mark.anyio
B = Hook.BEFORE_MAIN_LLM

CREDENTIAL = "cred-Zq81-unique-literal-secret"
KEY = "sk-proj-" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5oQ7s"
assert len(KEY) == len("sk-proj-") + 40


async def dump_everything(stores: InMemoryStores, result: RunResult) -> str:
    """Every record a run left in the stores, as JSON text."""
    run, op_runs = await stores.runs.get_run(result.run.run_id)
    parts = [run.model_dump_json(), *(o.model_dump_json() for o in op_runs)]
    parts += [e.model_dump_json() for e in await stores.runs.events(run.run_id)]
    parts += [m.model_dump_json() for m in await stores.chats.history(run.chat_id, run.branch_id)]
    artifacts = await session_artifacts(stores, run)
    parts += [a.model_dump_json() for a in artifacts.values()]
    parts.append(result.model_dump_json())
    return "\n".join(parts)


def artifact(tag: str) -> dict[str, Any]:
    return {"tag": tag, "persisted": True, "usage": "prompt+ui", "semantics": "state"}


@pytest.mark.parametrize("provider_fails", [False, True])
async def test_credentials_and_keys_stay_out_of_every_record(provider_fails: bool) -> None:
    def provider_fn(request: LlmRequest) -> str:
        assert request.credential == CREDENTIAL
        if provider_fails:
            raise ProviderError(f"invalid api key {request.credential}; also tried {KEY}")
        # A careless model echoes what it was sent.
        return f"echo: {request.credential} {KEY} " + request.messages[-1].content

    stores = InMemoryStores()
    main_llm = ScriptedMainLlm()
    catalog = OperationCatalog(
        kinds=builtin_kinds(
            providers=ProviderRegistry({"p": FunctionProvider(provider_fn)}),
            credentials=StaticCredentials({"vault:main": CREDENTIAL}),
        )
    )
    catalog.add_definition(OperationDefinition(operation_id="aux", name="Aux", kind="llm"))
    catalog.add_definition(OperationDefinition(operation_id="tpl", name="Tpl", kind="template"))
    catalog.add_definition(OperationDefinition(operation_id="bad", name="Bad", kind="template"))
    runner = make_runner(stores=stores, catalog=catalog, main_llm=main_llm)
    llm_params = {
        "providerRef": "p",
        "model": "m",
        "credentialRef": "vault:main",
        "system": f"Use {KEY} and {CREDENTIAL} wisely.",
        "prompt": f"key={KEY} {CREDENTIAL} " + "{{ chatHistory | last: 1 | map: 'content' }}",
        "stop": [KEY, CREDENTIAL],
        "writeArtifact": artifact("notes"),
        "promptEffect": {"type": "prompt.append_after_last_user"},
    }
    template_params = {
        "template": f"Authorization: Bearer {KEY}\npassword={CREDENTIAL}\n{KEY}",
        "writeArtifact": artifact("panel"),
        "promptEffect": {"type": "prompt.system_update", "mode": "append"},
    }
    # fails only while rendering (strict variables), with the key in its source
    broken_template = {
        "template": f"{{{{ '{KEY}' | append: not_defined }}}}",
        "strictVariables": True,
    }
    operations = (
        ProfileOperation(
            operation_id="aux", config=OperationConfig(hooks=(B,), order=1, params=llm_params)
        ),
        ProfileOperation(
            operation_id="tpl", config=OperationConfig(hooks=(B,), order=2, params=template_params)
        ),
        ProfileOperation(
            operation_id="bad", config=OperationConfig(hooks=(B,), order=3, params=broken_template)
        ),
    )
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p", name="P", operation_profile_session_id="s", operations=operations
        )
    )
    result = await runner.run(
        RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="hello")
    )

    aux = result.operation("aux")
    if provider_fails:
        assert aux.error is not None
        assert aux.error.code == "provider_error"
        assert "[REDACTED]" in aux.error.message
    else:
        assert aux.status.value == "done"
    assert result.operation("tpl").status.value == "done"
    bad = result.operation("bad").error
    assert bad is not None
    assert bad.code == "template_render_error"

    everything = await dump_everything(stores, result)
    assert CREDENTIAL not in everything
    assert KEY not in everything
    assert KEY[8:30] not in everything  # not even the key body
    assert "vault:main" not in everything  # the credentialRef itself is not logged either
    assert "[REDACTED]" in everything  # the values were there, masked

    # Nor does the main LLM get them through the prompt effects.
    request = main_llm.last_request
    assert request is not None
    sent = "\n".join(m.content for m in request.messages)
    assert CREDENTIAL not in sent
    assert KEY not in sent
