"""runtime.worker.outcome: how a stage's exception becomes a job's failure (permanent,
transient, rate-limited or a bug), its message one line."""

from __future__ import annotations

from runtime.errors import (
    InvalidDocument,
    PermanentError,
    RateLimited,
    TransientError,
)
from runtime.worker.outcome import failure_of


def test_failure_classification() -> None:
    assert failure_of(InvalidDocument("a.pdf: encrypted")).permanent
    assert failure_of(PermanentError("x")).kind == "permanent"
    transient = failure_of(TransientError("HTTP 503", retry_after_s=4))
    assert not transient.permanent and transient.retry_after_s == 4
    assert failure_of(RateLimited("429")).kind == "rate_limited"
    bug = failure_of(KeyError("k"))
    assert not bug.permanent and bug.message == "KeyError: 'k'"
    assert "\n" not in failure_of(TransientError("line one\nline two")).message
