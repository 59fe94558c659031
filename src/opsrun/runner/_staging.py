"""The staging area: artifacts and prompt effects a run has committed, and the commit.

Operations only *stage* their effects. When a hook ends, :meth:`Staging.commit` applies
the staged effects of its ``done`` operations in commit order (dependencies first, then
``order``, then id), one operation at a time and atomically per operation: the artifact
write goes first, and when the store rejects it the operation turns ``error`` and none
of its effects apply.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from ..errors import ArtifactConflict, StoreError
from ..model import (
    AppliedEffect,
    Artifact,
    ArtifactRef,
    ArtifactVersion,
    ArtifactWrite,
    AugmentationStorage,
    ChatMessage,
    OperationStatus,
    PromptEffect,
)
from ..prompt import EffectivePrompt, effective_prompt
from ..report import artifact_diff
from ._artifacts import commit_order, next_artifact
from ._context import RunContext
from ._ledger import OperationLedger, OpExec, error_of
from ._turn import Turn

__all__ = ["Staging"]


class Staging:
    """The committed state of one run: persisted and run-only artifacts, prompt effects."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        self.persisted: dict[str, Artifact] = {}
        """The session's persisted artifacts, as the run last saw or wrote them."""
        self.run_only: dict[str, Artifact] = {}
        """Run-only artifacts committed so far."""
        self.prompt_effects: list[tuple[str, PromptEffect]] = []
        """``(operationId, effect)`` pairs in commit order."""
        self.applied: list[AppliedEffect] = []
        """Every applied effect, in commit order."""
        self._commits = 0
        self._changes = 0
        """Counts changes of what the effective prompt reads (artifacts, prompt effects)."""
        self._prompt: tuple[Sequence[ChatMessage], int, EffectivePrompt] | None = None
        """The last effective prompt, with the history and the change count it was built on."""

    def release(self) -> None:
        """Let go of everything staged (the run is recorded and needs none of it)."""
        self.persisted = {}
        self.run_only = {}
        self.prompt_effects = []
        self.applied = []
        self._prompt = None

    async def load(self) -> tuple[ArtifactRef, ...]:
        """Read the session's persisted artifacts; return their refs (tag order)."""
        ctx = self._ctx
        if ctx.session_key is None:
            return ()
        await ctx.sessions.get_or_create_session(ctx.session_key, ctx.started_at)
        self.persisted = await ctx.sessions.get_artifacts(ctx.session_key)
        self._changes += 1
        return tuple(
            ArtifactRef(tag=tag, version=self.persisted[tag].version)
            for tag in sorted(self.persisted)
        )

    def committed(self) -> dict[str, Artifact]:
        """Committed artifacts by tag (run-only ones win over persisted ones)."""
        return {**self.persisted, **self.run_only}

    def effective_prompt(self, history: Sequence[ChatMessage]) -> EffectivePrompt:
        """The effective prompt from what is committed so far.

        Built once per state: the same ``history`` object with nothing committed since
        returns the prompt built last (the before_main_llm draft, when its operations
        committed nothing, is the prompt the main LLM receives).
        """
        cached = self._prompt
        if cached is not None and cached[0] is history and cached[1] == self._changes:
            return cached[2]
        prompt = self._build_prompt(history)
        self._prompt = (history, self._changes, prompt)
        return prompt

    def _build_prompt(self, history: Sequence[ChatMessage]) -> EffectivePrompt:
        ctx = self._ctx
        last = len(ctx.profile_rank)
        artifacts = [
            (ctx.profile_rank.get(a.written_by or "", last), a) for a in self.committed().values()
        ]
        return effective_prompt(
            ctx.request.system_prompt,
            history,
            self.prompt_effects,
            artifacts=artifacts,
            window=ctx.window,
        )

    async def commit(self, done: Sequence[OpExec], ledger: OperationLedger, turn: Turn) -> None:
        """Apply the staged effects of ``done`` operations in commit order."""
        ordered = commit_order(
            done,
            key=lambda e: e.operation_id,
            depends_on=lambda e: e.config.depends_on,
            order=lambda e: e.config.order,
        )
        for e in ordered:
            assert e.result is not None
            effects = e.result.effects
            if effects.artifact is not None or effects.prompt:
                self._changes += 1  # what the effective prompt reads changes
            if effects.artifact is None and not effects.turn:
                self._settle(e, [])  # prompt effects only: no store
                continue
            # One operation's effects apply whole: a cancellation from outside waits
            # for the operation being committed (the stores bound their own calls), so
            # a persisted artifact never goes without the same operation's turn effects.
            with anyio.CancelScope(shield=True):
                await self._commit_one(e, ledger, turn)
            await anyio.lowlevel.checkpoint_if_cancelled()  # one that waited lands here

    async def _commit_one(self, e: OpExec, ledger: OperationLedger, turn: Turn) -> None:
        """Apply ``e``'s staged effects; none when the store refuses its artifact write."""
        assert e.result is not None
        effects = e.result.effects
        applied: list[AppliedEffect] = []
        if effects.artifact is not None:
            record = await self._write(e, effects.artifact, ledger)
            if record is None:
                return
            applied.append(record)
        try:
            for turn_effect in effects.turn:
                await turn.apply(e.operation_id, turn_effect)
                applied.append(self._applied(e, turn_effect.type, len(applied)))
        except BaseException:
            # The store failed (the run fails with it) after taking some of the
            # effects: the run's record lists those, so it tells what was written.
            self.applied.extend(applied)
            raise
        self._settle(e, applied)

    def _settle(self, e: OpExec, applied: list[AppliedEffect]) -> None:
        """Stage ``e``'s prompt effects and count it committed, after ``applied``."""
        assert e.result is not None
        for prompt_effect in e.result.effects.prompt:
            self.prompt_effects.append((e.operation_id, prompt_effect))
            applied.append(self._applied(e, prompt_effect.type, len(applied)))
        e.committed = True
        e.commit_index = self._commits
        self._commits += 1
        self.applied.extend(applied)

    def _applied(self, e: OpExec, kind: str, offset: int, **extra: object) -> AppliedEffect:
        return AppliedEffect.model_validate(
            {
                "index": len(self.applied) + offset,
                "operation_id": e.operation_id,
                "hook": e.hook,
                "type": kind,
                **extra,
            }
        )

    async def _write(
        self, e: OpExec, write: ArtifactWrite, ledger: OperationLedger
    ) -> AppliedEffect | None:
        """Apply ``e``'s artifact write; None when the store refused it (``e`` is then error)."""
        if not write.persisted:
            previous = self.run_only.get(write.tag)
            artifact, _ = self._next(previous, write, e)
            self.run_only[write.tag] = artifact
            return self._applied(
                e,
                "artifact.write",
                0,
                tag=write.tag,
                version=artifact.version,
                summary=self._change(previous, artifact),
            )
        try:
            current, artifact, based_on, pruned = await self._write_persisted(e, write)
        except StoreError as exc:
            e.end(OperationStatus.ERROR, error=error_of(exc.code, exc.message, exc.details))
            e.result = None
            ledger.announce(e)
            return None
        self.persisted[write.tag] = artifact
        pruned_versions = tuple(p.version for p in pruned)
        if pruned:
            e.outputs_summary = {**e.outputs_summary, "prunedVersions": list(pruned_versions)}
        return self._applied(
            e,
            "artifact.write",
            0,
            tag=write.tag,
            version=artifact.version,
            based_on_version=based_on,
            summary=self._change(current, artifact),
            pruned_versions=pruned_versions,
        )

    async def _write_persisted(
        self, e: OpExec, write: ArtifactWrite
    ) -> tuple[Artifact | None, Artifact, int | None, tuple[ArtifactVersion, ...]]:
        """Compare-and-set ``write`` in the session store; archive what retention prunes.

        Raises:
            StoreError: the write is stale (``artifact_conflict``), the archive or the
                store refused it.
        """
        ctx = self._ctx
        key = ctx.session_key
        assert key is not None, "persisted artifacts need a profile session"
        current = (await ctx.sessions.get_artifacts(key)).get(write.tag)
        based_on = write.based_on_version
        if based_on is None:
            seen = self.persisted.get(write.tag)
            based_on = seen.version if seen is not None else None
        current_version = current.version if current is not None else None
        if current_version != based_on:
            raise ArtifactConflict(
                f"art.{write.tag} is at version {current_version}, the write was based on "
                f"{based_on}",
                details={"tag": write.tag},
            )
        artifact, pruned = self._next(current, write, e)
        if pruned and ctx.archive is not None:  # before the write: a failure loses nothing
            await self._archive(write.tag, pruned)
        await ctx.sessions.put_artifact(key, artifact, expected_version=based_on)
        return current, artifact, based_on, pruned

    def _next(
        self, current: Artifact | None, write: ArtifactWrite, e: OpExec
    ) -> tuple[Artifact, tuple[ArtifactVersion, ...]]:
        return next_artifact(
            current,
            write,
            now=self._ctx.clock.now(),
            run_id=self._ctx.run_id,
            operation_id=e.operation_id,
        )

    async def _archive(self, tag: str, pruned: tuple[ArtifactVersion, ...]) -> None:
        ctx = self._ctx
        assert ctx.archive is not None
        assert ctx.session_key is not None
        try:
            await ctx.archive.archive(ctx.session_key, tag, pruned, run_id=ctx.run_id)
        except StoreError:
            raise
        except Exception as exc:  # a broken archive must not crash the run
            raise StoreError(
                f"the archive rejected pruned versions of art.{tag}: {type(exc).__name__}: {exc}",
                code="archive_failed",
                details={"tag": tag, "versions": [p.version for p in pruned]},
            ) from exc

    def _change(self, old: Artifact | None, new: Artifact) -> str:
        """The redacted short diff recorded with an artifact write; its values are kept
        as the snapshot keeps augmentation: in part with ``summary``, not at all with
        ``hash_only``."""
        policy = self._ctx.snapshot
        if policy.augmentation == AugmentationStorage.HASH_ONLY:
            if old is None:
                return "created"
            return "unchanged" if old.value == new.value else "changed"
        diff = self._ctx.redactor.redact(
            artifact_diff(None if old is None else old.value, new.value)
        )
        if policy.augmentation == AugmentationStorage.SUMMARY:
            diff = diff[: policy.summary_chars]
        return diff
