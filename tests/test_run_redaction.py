"""No secret a run sees survives into anything the run store keeps.

The run below sees realistic key shapes in the user message, the system prompt, the
generation params, an operation's error, an operation's summary, a prompt effect, a
template's output and the main LLM's streamed reply (split across deltas). Afterwards
every stored run record, operation run and event is scanned.
"""

from __future__ import annotations

import json

import pytest

from _support import make_runner
from opsrun import Redactor, Runner
from opsrun.kinds import builtin_kinds
from opsrun.model import (
    AppendAfterLastUser,
    Hook,
    OperationConfig,
    OperationDefinition,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    RunRequest,
    Trigger,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.providers import ProviderRegistry
from opsrun.redaction import MASK
from opsrun.report import render_markdown
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm, ScriptedProvider
from test_redact import (
    ANTHROPIC,
    AWS_ID,
    BEARER,
    GH_PAT,
    GOOGLE,
    JWT,
    OPENAI_ADMIN,
    OPENAI_PROJ,
    OPENAI_SVC,
    SLACK,
    STRIPE,
)
from test_redact_rules import POSITIVES, fragments

pytestmark = pytest.mark.anyio

HOST_SECRET = "tenant-4f9a-internal-signing-secret"
SECRETS = [
    OPENAI_PROJ,
    OPENAI_SVC,
    OPENAI_ADMIN,
    ANTHROPIC,
    AWS_ID,
    GOOGLE,
    GH_PAT,
    SLACK[0],
    STRIPE[0],
    JWT,
    BEARER,
    HOST_SECRET,
]


def profile() -> OperationProfile:
    def entry(op_id: str, hook: Hook, order: int, **params: object) -> ProfileOperation:
        return ProfileOperation(
            operation_id=op_id,
            config=OperationConfig(hooks=(hook,), order=order, params=dict(params)),
        )

    echo = "{{ chatHistory | last: 1 | map: 'content' | join }}"
    return OperationProfile(
        profile_id="p",
        name="P",
        operation_profile_session_id="s",
        operations=(
            entry("leaky_error", Hook.BEFORE_MAIN_LLM, 1),
            entry("leaky_summary", Hook.BEFORE_MAIN_LLM, 2),
            entry("leaky_effect", Hook.BEFORE_MAIN_LLM, 3),
            entry(
                "echo",
                Hook.BEFORE_MAIN_LLM,
                4,
                template=echo,
                writeArtifact={"tag": "echo", "persisted": True},
            ),
            entry("after_error", Hook.AFTER_MAIN_LLM, 5),
        ),
    )


def catalog() -> OperationCatalog:
    cat = OperationCatalog(kinds=builtin_kinds(providers=ProviderRegistry({})))
    cat.add_definition(OperationDefinition(operation_id="echo", name="Echo", kind="template"))

    @cat.function("leaky_error", name="Leaky error")
    async def _error(ctx: OperationContext) -> OperationResult:
        raise RuntimeError(f"upstream refused key {OPENAI_ADMIN} for {HOST_SECRET}")

    @cat.function("leaky_summary", name="Leaky summary")
    async def _summary(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(
            outputs_summary={"used": f"Authorization: Bearer {BEARER}", "slack": SLACK[0]}
        )

    @cat.function("leaky_effect", name="Leaky effect")
    async def _effect(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(
            prompt=[AppendAfterLastUser(content=f"(note: the user's GitHub token is {GH_PAT})")]
        )

    @cat.function("after_error", name="After error")
    async def _after(ctx: OperationContext) -> OperationResult:
        text = ctx.main_llm.text if ctx.main_llm else ""
        raise ValueError(f"could not parse reply {text!r}")

    return cat


async def test_no_secret_survives_into_the_run_store() -> None:
    stores = InMemoryStores()
    await stores.profiles.save_profile(profile())
    reply = f"Your keys: {OPENAI_PROJ} and {AWS_ID}; also {JWT}. Done."
    main_llm = ScriptedMainLlm([reply], chunk_size=7)
    runner = make_runner(
        stores=stores,
        catalog=catalog(),
        main_llm=main_llm,
        redactor=Redactor(secrets=(HOST_SECRET,)),
    )
    request = RunRequest(
        trigger=Trigger.GENERATE,
        chat_id="c",
        profile_id="p",
        user_message=f"my keys are {OPENAI_SVC} and {ANTHROPIC} and {GOOGLE}",
        system_prompt=f"Internal: signing secret {HOST_SECRET}; stripe {STRIPE[0]}",
        main_llm_params={"model": "m", "apiKey": OPENAI_PROJ, "headers": f"Bearer {BEARER}"},
    )
    result = await runner.run(request)

    # The secrets really were in play: the main LLM was sent them and streamed one back.
    assert main_llm.last_request is not None
    sent = json.dumps([m.content for m in main_llm.last_request.messages])
    assert OPENAI_SVC in sent
    assert HOST_SECRET in sent
    assert GH_PAT in sent
    assert result.operation("leaky_error").error is not None

    stored: list[str] = []
    for run_id in stores.runs.run_ids():
        run, op_runs = await stores.runs.get_run(run_id)
        stored.append(run.model_dump_json())
        stored.extend(o.model_dump_json() for o in op_runs)
        stored.extend(e.model_dump_json() for e in await stores.runs.events(run_id))
    report = await runner.explain(result.run.run_id)
    stored.append(report.model_dump_json())
    stored.append(render_markdown(report))
    text = "\n".join(stored)
    leaked = [s[:12] for s in SECRETS if s in text]
    assert leaked == []
    assert "[REDACTED]" in text
    # The streamed reply still arrives, masked, and in full.
    deltas = [e for e in await stores.runs.events(result.run.run_id) if e.type == "main_llm.delta"]
    assert "".join(d.text for d in deltas) == runner.redactor.redact(reply)


# Every family, through a whole run: the user message, generation params, an operation
# error (a repr with an escaped newline, and a message cut at 1024 inside the key), a
# summary (JSON text and double-encoded JSON), an llm operation's reply and the streamed
# main LLM reply. Afterwards every stored record is scanned for the secret and for any
# 8-character piece of it.
def family_catalog(text: str, reply: str) -> OperationCatalog:
    provider = ScriptedProvider([reply])
    cat = OperationCatalog(kinds=builtin_kinds(providers=ProviderRegistry({"test": provider})))
    cat.add_definition(OperationDefinition(operation_id="aux", name="Aux", kind="llm"))
    cfg = {"env": "MODE=dev\n" + text}

    @cat.function("repr_error", name="Repr error")
    async def _repr(ctx: OperationContext) -> OperationResult:
        raise ValueError(f"bad config {cfg!r}")

    @cat.function("cut_error", name="Cut error")
    async def _cut(ctx: OperationContext) -> OperationResult:
        raise RuntimeError("~" * 1010 + text + " and the rest")

    @cat.function("summary", name="Summary")
    async def _summary(ctx: OperationContext) -> OperationResult:
        once = json.dumps(cfg)
        return OperationResult.done(
            outputs_summary={"json": once, "double": json.dumps(once), "long": "~" * 1020 + text}
        )

    return cat


def family_profile() -> OperationProfile:
    def entry(op_id: str, order: int, **params: object) -> ProfileOperation:
        return ProfileOperation(
            operation_id=op_id,
            config=OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=order, params=params),
        )

    llm = {
        "providerRef": "test",
        "model": "aux-model",
        "prompt": "Summarise: {{ chatHistory | last: 1 | map: 'content' | join }}",
        "output": {"mode": "json"},
        "writeArtifact": {"tag": "notes", "persisted": True},
    }
    return OperationProfile(
        profile_id="p",
        name="P",
        operation_profile_session_id="s",
        operations=(
            entry("repr_error", 1),
            entry("cut_error", 2),
            entry("summary", 3),
            entry("aux", 4, **llm),
        ),
    )


async def stored_text(stores: InMemoryStores, runner: Runner, run_id: str) -> str:
    stored: list[str] = []
    for rid in stores.runs.run_ids():
        run, op_runs = await stores.runs.get_run(rid)
        stored.append(run.model_dump_json())
        stored.extend(o.model_dump_json() for o in op_runs)
        stored.extend(e.model_dump_json() for e in await stores.runs.events(rid))
    report = await runner.explain(run_id)
    stored.append(report.model_dump_json())
    stored.append(render_markdown(report))
    return "\n".join(stored)


@pytest.mark.parametrize(("name", "text", "body"), POSITIVES, ids=lambda v: str(v)[:24])
async def test_every_family_is_masked_in_every_stored_record(
    name: str, text: str, body: str
) -> None:
    stores = InMemoryStores()
    await stores.profiles.save_profile(family_profile())
    llm_reply = "Sure: {" + json.dumps({"env": "a\n" + text}) + " not json"
    escaped = json.dumps({"k": "v\n" + text})
    reply = f"Here: {text}\nand {escaped} done."
    runner = make_runner(
        stores=stores,
        catalog=family_catalog(text, llm_reply),
        main_llm=ScriptedMainLlm([reply], chunk_size=5),
    )
    result = await runner.run(
        RunRequest(
            trigger=Trigger.GENERATE,
            chat_id="c",
            profile_id="p",
            user_message=f"my config:\n{text}\n",
            main_llm_params={"model": "m", "note": text, "env": "MODE=dev\n" + text},
        )
    )
    assert result.operation("repr_error").error is not None
    aux_summary = result.operation("aux").outputs_summary
    assert "rawTextPreview" in aux_summary  # the llm reply really was recorded
    stored = await stored_text(stores, runner, result.run.run_id)
    assert body not in stored
    assert [f for f in fragments(body) if f in stored] == []
    assert MASK in stored


async def test_an_llm_reply_cut_inside_a_key_keeps_no_half() -> None:
    stores = InMemoryStores()
    await stores.profiles.save_profile(family_profile())
    key = OPENAI_PROJ
    llm_reply = "{" + "z" * 1000 + key  # the preview keeps 15 characters of the body
    runner = make_runner(stores=stores, catalog=family_catalog("plain", llm_reply))
    result = await runner.run(
        RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="hi")
    )
    stored = await stored_text(stores, runner, result.run.run_id)
    assert [f for f in fragments(key[8:]) if f in stored] == []
