"""What an attempt came to, and how an exception from a stage is classified."""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec

from runtime.db.errors import is_storage_full
from runtime.errors import StageError, StorageFull, TransientError, one_line
from runtime.models import Failure

#: The kind of an unclassified exception (a bug, a library error): counted in attempts.
UNCLASSIFIED = "error"
#: A job handed back because storage was full waits at least this long: space rarely
#: comes back within seconds, and every retry would fail the same way meanwhile.
STORAGE_FULL_RETRY_S = 15.0


class Success(msgspec.Struct, frozen=True):
    output: Any


class Lost(msgspec.Struct, frozen=True):
    pass


class Shutdown(msgspec.Struct, frozen=True):
    pass


class Snoozed(msgspec.Struct, frozen=True):
    """The stage raised :class:`runtime.errors.Snooze`: the job goes back untried."""

    message: str
    delay_s: float


Outcome = Success | Failure | Lost | Shutdown | Snoozed


def storage_full(exc: BaseException) -> Failure:
    return Failure(
        message=one_line(f"storage full: {type(exc).__name__}: {exc}"),
        kind=StorageFull.kind,
        permanent=False,
        retry_after_s=STORAGE_FULL_RETRY_S,
    )


def failure_of(exc: BaseException) -> Failure:
    """Classify an exception from a stage: permanent, transient, or rate-limited."""
    if is_storage_full(exc) and not isinstance(exc, StageError):
        return storage_full(exc)
    if isinstance(exc, StageError):
        retry_after = exc.retry_after_s if isinstance(exc, TransientError) else None
        return Failure(
            message=one_line(exc.message or type(exc).__name__),
            kind=exc.kind,
            permanent=not isinstance(exc, TransientError),
            retry_after_s=retry_after,
        )
    if isinstance(exc, asyncpg.DataError):
        # Bad data for a column (e.g. invalid text): the same input fails the same way.
        return Failure(
            message=one_line(f"{type(exc).__name__}: {exc}"), kind="invalid_data", permanent=True
        )
    # Anything unclassified (a bug, a library error) gets retried within max_attempts;
    # the message keeps the type so the person reading it can tell.
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return Failure(message=one_line(text), kind=UNCLASSIFIED, permanent=False)
