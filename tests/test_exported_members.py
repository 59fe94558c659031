"""The public surface: each public module exports exactly the names listed here.

A name added to or dropped from a public module is an API change: it must change this
file too (httpx keeps its own ``__all__`` in step the same way).
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

import pytest

import opsrun
import opsrun.errors
from opsrun.errors import OpsrunError

EXPECTED: dict[str, str] = {
    "opsrun": """
        AbortSignal AppendAfterLastUser ConfigError Hook InMemoryStores InsertAtDepth
        Operation OperationCatalog OperationConfig OperationContext OperationDefinition
        OperationFailed OperationProfile OperationResult OpsrunError ProfileInvalid
        ProfileOperation Redactor RunRequest RunResult Runner SyncOperation SystemUpdate
        builtin_kinds
    """,
    "opsrun.errors": """
        ApplyError ArtifactConflict ConfigError NotFound OperationFailed OpsrunError
        PatchError PlanError ProfileInvalid ProviderError ProviderTimeout ProviderUnavailable
        RateLimited ResponseFormatRejected RunError StoreError TemplateError bound_details
        bound_text
    """,
    "opsrun.model": """
        AfterLastUser AfterMessageId Anchor AppendAfterLastUser
        AppendAfterLastUserTarget AppliedEffect ArchivedVersion Artifact ArtifactRef
        ArtifactUsage ArtifactVersion ArtifactWrite AssistantBlocks AssistantMeta
        AssistantVariant AugmentationStorage BeforeLastAssistant Budget ChatMessage
        ChatRole ChatSummary ContentFormat DebugConfig DomainRole DurableRetention
        FailedDetails FailedType
        FinishReason Hook InclusionAction InclusionRecord InsertAtDepth
        InsertAtDepthTarget JsonObject JsonValue LlmParams MAX_JSON_DEPTH MainLlmCall MainLlmDelta
        MainLlmFinished MainLlmStarted MainLlmStatus MessageVariant Model
        OperationCapabilities OperationConfig OperationDefinition OperationEffects
        OperationError OperationFinished OperationProfile OperationProfileSession
        OperationProfileSessionKey OperationResult OperationRun OperationStarted
        OperationStatus OutputSpec OverwriteRetention Page Phase ProfileIssue
        ProfileIssueCode ProfileOperation PromptEffect PromptEffectAdapter
        PromptEffectTarget PromptInclusion PromptMessage PromptSnapshot PromptSource
        RelativeToAnchor RelativeToEnd Retention RetentionAdapter RetryPolicy Run
        RunEvent RunEventAdapter RunFinished RunPhase RunPhaseChanged RunRequest
        RunResult RunStarted RunStatus Samplers SkippedReason SnapshotMessage
        SystemUpdate SystemUpdateTarget Tag TemplateParams Trigger TrimmedRange
        TurnEffect TurnEffectAdapter UiPresentation Usage UserVariant VersionSelector
        WindowRetention WriteArtifactSpec check_tag profile_json_schema turn_order
    """,
    "opsrun.operations": """
        AbortSignal FunctionOperation KindFactory Operation OperationCatalog
        OperationContext OperationFn RunMeta SyncOperation
    """,
    "opsrun.kinds": """
        LlmOperation TemplateOperation TokenCounter approximate_tokens builtin_kinds
    """,
    "opsrun.kinds.liquid": """
        TemplateCacheInfo TemplateEngine TemplateLimits
    """,
    "opsrun.prompt": """
        EffectivePrompt HistoryWindow SnapshotPolicy TokenCounter TrimReason TrimResult
        approximate_tokens effective_prompt prompt_hash take_snapshot tiktoken_counter
        to_provider_messages trim_history
    """,
    "opsrun.report": """
        EventLog ReportArtifacts ReportExcerpt ReportGeneration ReportInput
        ReportMessage ReportOperation ReportOutcome ReportPrivacy ReportPrompt
        ReportStart RunReport SessionView artifact_diff build_report render_markdown
        session_view sse_comment sse_event sse_stream ui_projection
    """,
    "opsrun.runner": """
        DEFAULT_CONCURRENCY Executor InProcessExecutor MainLlmRetry RunEvents Runner
        SystemClock ThreadExecutor UuidIds
    """,
    "opsrun.stores": """
        ArchivedVersion InMemoryArchive InMemoryChatStore InMemoryProfileStore
        InMemoryRunStore InMemorySessionStore InMemoryStores
    """,
    "opsrun.stores.postgres": """
        SCHEMA_VERSION PostgresArchive PostgresChatStore PostgresProfileStore
        PostgresRunStore PostgresSessionStore PostgresStores
    """,
    "opsrun.stores.sqlite": """
        SCHEMA_VERSION SqliteArchive SqliteChatStore SqliteProfileStore SqliteRunStore
        SqliteSessionStore SqliteStores
    """,
    "opsrun.providers": """
        CredentialResolver EnvCredentials LlmProvider LlmRequest LlmResponse
        ProviderCapabilities ProviderRegistry ResponseFormat
    """,
    "opsrun.providers.anthropic": """
        AnthropicProvider
    """,
    "opsrun.providers.openai": """
        OpenAIProvider
    """,
    "opsrun.ports": """
        ArtifactArchive ChatStore Clock CredentialResolver EventSink IdFactory
        LlmProvider LlmRequest LlmResponse MainLlm MainLlmDone MainLlmRequest
        ProfileStore ProviderCapabilities ProviderFinishReason ProviderLookup
        ProviderMessage ResponseFormat RunStore STRUCTURED_OUTPUT_LEVELS SessionStore
        Stores StructuredOutput
    """,
    "opsrun.telemetry": """
        RunLogFilter Telemetry log_context
    """,
    "opsrun.redaction": """
        DEFAULT_REDACTOR MASK Redactor StreamRedactor redact_text redact_value
    """,
    "opsrun.protocol": """
        Action ActionKind ApplyResult CheckCommand ContextRequest ContextRequestType
        DiffItem FileSystem MEMORY_PATCH_KEYS NO_CHANGES_PREFIX PathPolicy Plan
        PlanLimits ProjectPrefs TransactionOutcome UserPrefs Violation
        apply_memory_patch apply_patch apply_plan canonical_order check_base_sha256
        check_memory_patch load_schema looks_like_unified_diff normalize_eol parse_plan
        plan_from_json preview_plan recover replace_range schema_hash sha256_hex undo
        validate_plan
        DriverConfig DriverResult EVENT_NAMES FallbackMetrics FilePlanState
        InMemoryPlanState PlanDriver PlanEvent PlanEventSink PlanState REPAIR_HINTS
        SavedPlan fallback_metrics load_traces system_prompt
        ContextBlock EnvBlock FileBlock FileSystemContext LogsBlock ProjectContext Refusal
        SearchBlock render_context ContextLimits Diet apply_diet FileMemory InMemoryMemory
        MemoryStore MemoryUpdater memory_block
        HunkPlacement PatchResult PatchTolerance apply_patch_detailed
    """,
    "opsrun.testing": """
        Delayed Exchange FakeAnthropicServer FakeClock FakeOpenAIServer FaultyFileSystem
        FunctionMainLlm FunctionProvider
        OfflineMainLlm ProviderReply RecordingProvider ScriptedMainLlm ScriptedProvider
        SequentialIds StaticCredentials StoreContract
    """,
}
"""Every public module and its exact ``__all__`` (whitespace-separated)."""

PUBLIC_MODULES = list(EXPECTED)


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.mark.parametrize("module_name", sorted(EXPECTED))
def test_all_is_exactly_the_public_surface(module_name: str) -> None:
    module = _module(module_name)
    assert sorted(module.__all__) == sorted(EXPECTED[module_name].split())


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_all_names_exist_once(module_name: str) -> None:
    exported = list(_module(module_name).__all__)
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    assert [name for name in exported if not hasattr(_module(module_name), name)] == []


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_members_are_exported(module_name: str) -> None:
    module = _module(module_name)
    public = {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", "").startswith(module_name)
    }
    assert public - set(module.__all__) == set()


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_exported_errors_belong_to_the_tree(module_name: str) -> None:
    module = _module(module_name)
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, OpsrunError), name
            assert isinstance(obj.default_code, str), name
            assert obj.default_code.strip(), name


def test_error_codes_are_distinct() -> None:
    classes = [
        obj
        for obj in vars(opsrun.errors).values()
        if inspect.isclass(obj) and issubclass(obj, OpsrunError)
    ]
    codes = [cls.default_code for cls in classes]
    assert len(codes) == len(set(codes))


def test_top_level_names_are_the_subpackages_objects() -> None:
    homes = [_module(name) for name in sorted(EXPECTED) if name != "opsrun"]
    for name in opsrun.__all__:
        owners = [m for m in homes if name in m.__all__]
        assert owners, f"{name} has no home subpackage"
        assert all(getattr(m, name) is getattr(opsrun, name) for m in owners), name


def test_one_name_means_one_thing() -> None:
    seen: dict[str, object] = {}
    for module_name in PUBLIC_MODULES:
        module = _module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if name in seen and (inspect.isclass(obj) or inspect.isfunction(obj)):
                assert seen[name] is obj, f"{name} means two things ({module_name})"
            seen.setdefault(name, obj)


def test_version() -> None:
    assert isinstance(opsrun.__version__, str)
    assert opsrun.__version__.count(".") == 2
