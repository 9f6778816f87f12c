"""The contract between the engine and a pipeline.

The engine knows stages only by name. A pipeline (``stages/`` for ragline's RAG pipeline,
or a test pipeline) hands the engine an ordered tuple of :class:`Stage` objects; completing
stage *i* enqueues stage *i + 1* in the same transaction, and completing the last stage
makes the document ready.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

import asyncpg
import msgspec

from runtime.errors import ConfigurationError
from runtime.models import Job

#: A connection inside a transaction the engine opened (plain or pooled).
DbConn: TypeAlias = "asyncpg.Connection[Any] | asyncpg.pool.PoolConnectionProxy[Any]"
#: A function that writes into the database inside a transaction the engine opened.
Writer: TypeAlias = Callable[[DbConn], Awaitable[None]]


class JobContext(Protocol):
    """What a stage's ``process`` may use while it runs."""

    @property
    def job(self) -> Job: ...

    @property
    def pool(self) -> asyncpg.Pool[Any]:
        """A pool for reads (inputs, checkpoints of earlier stages)."""
        ...

    async def checkpoint(self, write: Writer) -> None:
        """Run ``write`` in a transaction that first checks this job still holds its lease.

        For intermediate checkpoints (an embedded batch, a described image) so a retry
        skips finished work. Raises :class:`runtime.errors.LeaseLost` and writes nothing
        when the lease is gone. An attempt that checkpointed does not count as a failed
        attempt if it then fails.
        """
        ...

    def calling(
        self, provider: str, *, tokens: int = 0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Wrap one call to ``provider`` (a name from the stage's ``providers``): waits
        for the fleet's budget (``tokens``: the call's estimated tokens) and the
        provider's circuit, and records the call's outcome on the circuit. Raises
        :class:`runtime.errors.ProviderUnavailable` while the circuit is open. Each call
        is a child span of the job's span in its document's trace (docs/tracing.md).
        """
        ...

    def note(self, **values: str | bool | int | float | None) -> None:
        """Attach figures about this run to its span, as ``ragline.<key>`` attributes
        (``pages=12, images=3, bytes=...``); None values are left out. A no-op when the
        document is not traced."""
        ...


@runtime_checkable
class Stage(Protocol):
    """One pipeline stage."""

    @property
    def name(self) -> str: ...

    async def process(self, ctx: JobContext) -> Any:
        """Do the stage's work and return its output.

        Must not write to the database except through ``ctx.checkpoint``. Raise
        :class:`runtime.errors.PermanentError` or :class:`runtime.errors.TransientError`
        (or subclasses) on failure; any other exception counts as transient.
        """
        ...

    async def write(self, conn: DbConn, job: Job, output: Any) -> None:
        """Write ``output`` inside the completion transaction (the checkpoint)."""
        ...

    async def on_failed(self, job: Job) -> None:
        """Undo side effects outside PostgreSQL after the job failed permanently (also
        when the sweep failed it after lost leases)."""
        ...


#: A stage may also declare ``holds_entry = True``: while all of its slots in a worker
#: are busy, that worker leases no new job of the pipeline's first stage (new documents),
#: and leaves them to its peers. For a stage whose jobs only one process at a time can
#: run (ragline's embedded vector index): that process would otherwise take its share of
#: new documents as well, its queue of the stage's jobs would grow while it parses, and
#: the run would end with the other processes idle while it catches up.
#: (:func:`holds_entry` reads it.)
#:
#: A stage may also declare ``providers``: a sequence of
#: :class:`runtime.providers.specs.ProviderSpec` its jobs call. The engine then holds the
#: stage's claims while one of their circuits is open and meters calls made through
#: :meth:`JobContext.calling` against the fleet's budget. It is optional, so it is not
#: part of the Protocol.


def holds_entry(stage: Stage) -> bool:
    """Whether a busy ``stage`` holds back its worker's new documents (see above)."""
    return bool(getattr(stage, "holds_entry", False))


class Pipeline(msgspec.Struct, frozen=True, kw_only=True):
    """An ordered set of stages plus the lifespan of the services they share."""

    stages: Sequence[Stage]
    lifespan: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None
    #: Builds what the named stages need (models, clients) and raises
    #: :class:`ConfigurationError` when it cannot, so a worker fails at start, not in a job.
    prepare_for: Callable[[Sequence[str]], None] | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.stages]
        if not names:
            raise ConfigurationError("a pipeline needs at least one stage")
        if len(set(names)) != len(names):
            raise ConfigurationError(f"duplicate stage names in pipeline: {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stages)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise ConfigurationError(f"unknown stage {name!r}; stages are {', '.join(self.names)}")

    def next_stage(self, name: str) -> str | None:
        names = self.names
        i = names.index(name)
        return names[i + 1] if i + 1 < len(names) else None

    def prepare(self, names: Sequence[str]) -> None:
        for name in names:
            self.stage(name)  # raises on an unknown stage
        if self.prepare_for is not None:
            self.prepare_for(names)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        if self.lifespan is None:
            yield
        else:
            async with self.lifespan():
                yield
