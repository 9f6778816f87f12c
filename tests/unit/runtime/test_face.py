"""The engine's face for pipelines (runtime/api.py): every name resolves, each is written
once, and the face exports functions, not the job repository."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_every_name_of_the_engines_face_resolves() -> None:
    import runtime.api as api

    assert api.__all__ == sorted(api._TABLE)  # the exports are the TYPE_CHECKING block's
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        api.Nope  # noqa: B018


def test_the_face_writes_each_name_once() -> None:
    """Each exported name appears once in runtime/api.py: in the block that both the type
    checker and the lazy table read, nowhere else."""
    import re

    import runtime.api as api

    source = Path(api.__file__).read_text()
    twice = [n for n in api.__all__ if len(re.findall(rf"\b{re.escape(n)}\b", source)) != 1]
    assert not twice, f"written more than once in runtime/api.py: {twice}"


def test_the_face_exports_functions_not_the_job_repository() -> None:
    import runtime.api as api

    assert "JobRepository" not in api.__all__
    assert {"enqueue_jobs", "cancel_document_jobs", "retry_failed_jobs"} <= set(api.__all__)
