"""What the stages that call a metered provider (embed, vision) share: the ``providers``
they declare to the engine, and the gate each call goes through."""

from __future__ import annotations

import contextlib

from runtime.api import JobContext, ProviderSpec
from stages.ports.services import Services


class ProviderStage:
    """A stage whose calls go to one provider, :attr:`provider` (None for a local model
    or none: no fleet budget or circuit applies, and calls pass no gate)."""

    def __init__(self, services: Services) -> None:
        self.services = services

    @property
    def provider(self) -> ProviderSpec | None:
        raise NotImplementedError

    @property
    def providers(self) -> tuple[ProviderSpec, ...]:
        spec = self.provider
        return (spec,) if spec is not None else ()

    def gate(
        self, ctx: JobContext, tokens: int = 0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Wraps one call: the engine's gate for the provider (``ctx.calling``), if any."""
        spec = self.provider
        if spec is None:
            return contextlib.nullcontext()
        return ctx.calling(spec.name, tokens=tokens)
