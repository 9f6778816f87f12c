"""How the pipeline's services are chosen from the environment."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from runtime.errors import ConfigurationError
from stages.services import Services, limiter_for


def test_rate_limit_applies_to_a_metered_embedder_only(tmp_path: Path) -> None:
    local = Services({}, tmp_path)
    assert not local.embedder.metered and local.limiter is None
    cohere = Services({"COHERE_API_KEY": "k", "RAGLINE_EMBED_RPM": "120"}, tmp_path)
    assert cohere.embedder.metered
    limiter = cohere.limiter
    assert limiter is not None and limiter.max_rate == 2.0 and limiter.time_period == 1.0


def test_limiter_holds_one_seconds_worth() -> None:
    assert limiter_for(0) is None
    slow = limiter_for(30)
    assert slow is not None and (slow.max_rate, slow.time_period) == (1, 2.0)
    fast = limiter_for(6000)
    assert fast is not None and (fast.max_rate, fast.time_period) == (100.0, 1.0)


def test_bad_rate_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="RAGLINE_EMBED_RPM"):
        Services({"RAGLINE_EMBED_RPM": "fast"}, tmp_path)


def test_a_parser_that_cannot_start_stops_the_worker_before_it_claims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker enters the services' lifespan before its first claim: a parser process
    that cannot start (here: a PyMuPDF it cannot import) is one line there."""
    fake = tmp_path / "shadow" / "pymupdf"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('this PyMuPDF is broken')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    services = Services({}, tmp_path)
    services.prepare(["parse"])

    async def enter() -> None:
        async with services.lifespan():
            raise AssertionError("the lifespan must not start")

    with pytest.raises(
        ConfigurationError,
        match=r"^cannot parse documents: the parser process exited with status 1 before it "
        r"was ready$",
    ):
        anyio.run(enter)
    assert "parser" not in services.__dict__  # closed with the rest


def test_the_lifespan_starts_once_the_parser_is_ready(tmp_path: Path) -> None:
    services = Services({}, tmp_path)
    services.prepare(["parse"])

    async def enter() -> int | None:
        async with services.lifespan():
            return services.parser.pid

    assert anyio.run(enter) is not None


def test_a_chunking_worker_loads_its_tokenizer_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tokenizer is built before the first claim (not in a chunk job's lease), so a
    missing tokenizer file stops the worker at start with one line."""
    services = Services({}, tmp_path)
    services.prepare(["chunk"])
    assert "token_counter" in services.__dict__
    assert "token_counter" not in Services({}, tmp_path).__dict__  # only when asked

    monkeypatch.setattr("stages.text.tokens.MINILM_TOKENIZER", tmp_path / "gone" / "tokenizer.json")
    with pytest.raises(ConfigurationError, match=r"^tokenizer file missing: .*gone"):
        Services({}, tmp_path).prepare(["chunk"])
