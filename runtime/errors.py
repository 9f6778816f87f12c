"""ragline's exceptions.

One base class, one subclass per condition; each docstring is the default message.
Stage code and service adapters raise :class:`PermanentError` or :class:`TransientError`
(directly or through a subclass) so the worker knows whether to retry; adapters chain the
vendor exception as ``__cause__``.
"""

from __future__ import annotations


class RaglineError(Exception):
    """ragline error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class StageError(RaglineError):
    """The stage failed."""

    #: Short machine-friendly category stored in ``stage_jobs.error_kind``.
    kind: str = "error"


class PermanentError(StageError):
    """The stage failed in a way no retry can fix."""

    kind = "permanent"


class TransientError(StageError):
    """The stage failed for a reason that may go away; it will be retried."""

    kind = "transient"

    def __init__(self, message: str | None = None, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        #: A server's Retry-After hint in seconds; the retry waits at least this long.
        self.retry_after_s = retry_after_s


class RateLimited(TransientError):
    """The provider is rate-limiting us."""

    kind = "rate_limited"


class ProviderUnavailable(TransientError):
    """The provider's circuit is open: the call was not made."""

    kind = "provider_unavailable"


class StorageFull(TransientError):
    """Storage is full (the database's disk or the asset store); the job waits for space
    without counting an attempt."""

    kind = "storage_full"


class InvalidDocument(PermanentError):
    """The document cannot be read."""

    kind = "invalid_document"


class MissingInput(PermanentError):
    """An input this stage needs is missing."""

    kind = "missing_input"


class Snooze(RaglineError):
    """Another worker is better placed to run the job now: it goes back to the queue
    untried (no attempt counted, no backoff in the database), and this worker claims no
    job of the stage for a while (River's ``JobSnooze``)."""

    def __init__(self, message: str | None = None, *, delay_s: float = 0.0) -> None:
        super().__init__(message)
        #: How long the job waits before any worker may claim it again.
        self.delay_s = delay_s


class LeaseLost(RaglineError):
    """The job's lease was lost; its work is abandoned and nothing is committed."""


class ConfigurationError(RaglineError, ValueError):
    """Invalid configuration."""


class DatabaseUnavailable(RaglineError, ConnectionError):
    """The database cannot be reached."""


def first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real cause in a task group's failure (a KeyboardInterrupt before any
    other), so callers classify and report it as if the work had run in sequence."""
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = (
            next((e for e in leaf.exceptions if isinstance(e, KeyboardInterrupt)), None)
            or leaf.exceptions[0]
        )
    return leaf


def one_line(text: str, limit: int = 500) -> str:
    """Collapse ``text`` to a single line of at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
