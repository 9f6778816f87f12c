"""The provider gate: one circuit and one budget per external provider (and model), for the fleet.

Every worker process keeps a :class:`Providers` for its stages' providers (see
:mod:`runtime.providers.specs`), and every call a stage makes goes through
:meth:`Providers.call`: the budget (requests and tokens per minute, two GCRA clocks in the
provider's row) and the circuit (transient failures counted across processes; while open,
no claims for its stages and calls refused with :class:`ProviderUnavailable`; one probe at
a time). Each transition is logged once and exported as ``ragline_provider_state``. How
each works: docs/architecture.md, "Providers". A call's span (opened around the gate by the
job's context, docs/tracing.md) gets the gate's part: the probe, and the wait for budget.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable

import anyio
from opentelemetry import trace

from runtime.db.errors import CONNECTION_ERRORS
from runtime.errors import (
    PermanentError,
    ProviderUnavailable,
    RateLimited,
    TransientError,
    one_line,
)
from runtime.process.tracing import annotate
from runtime.providers.board import STATE, ProviderBoard, log
from runtime.providers.specs import ProviderSpec


class _Ask:
    __slots__ = ("due", "tokens")

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self.due: float | None = None


class _Budget:
    """One provider's budget in this process: callers waiting together share a round
    trip (whoever holds the lock reserves slots for everyone queued behind it)."""

    def __init__(self, providers: Providers, spec: ProviderSpec) -> None:
        self.providers = providers
        self.spec = spec
        self.lock = anyio.Lock()
        self.pending: list[_Ask] = []
        self.per_request_s = 60.0 / spec.requests_per_min if spec.requests_per_min else 0.0
        self.per_token_s = 60.0 / spec.tokens_per_min if spec.tokens_per_min else 0.0

    async def wait_turn(self, tokens: int) -> None:
        ask = _Ask(tokens)
        self.pending.append(ask)
        async with self.lock:
            if ask.due is None:
                batch, self.pending = self.pending, []
                if ask not in batch:  # its batch's reservation failed (the database)
                    batch.append(ask)
                await self._reserve(batch)
        assert ask.due is not None
        await anyio.sleep(max(0.0, ask.due - time.monotonic()))

    async def _reserve(self, batch: list[_Ask]) -> None:
        tokens = sum(a.tokens for a in batch) if self.per_token_s else 0
        sent_at = time.monotonic()
        row = await self.providers.fetchrow(
            self.spec.name,
            "acquire_slots",
            self.spec.name,
            len(batch),
            self.per_request_s,
            tokens,
            self.per_token_s,
            None,
        )
        if row is None:  # not registered (a new provider): register, then go now
            await self.providers.register()
            row = {"request_wait_s": 0.0, "token_wait_s": 0.0}
        else:
            self.providers.saw(self.spec.name, row)
        used = 0
        for i, ask in enumerate(batch):
            wait = max(
                row["request_wait_s"] + i * self.per_request_s,
                row["token_wait_s"] + used * self.per_token_s,
            )
            used += ask.tokens
            ask.due = sent_at + wait


class Providers(ProviderBoard):
    """This process's view of its stages' providers, and the gate their calls pass."""

    @functools.cached_property
    def _budgets(self) -> dict[str, _Budget]:
        """The budgeted providers' budgets in this process (made on first use)."""
        return {n: _Budget(self, s) for n, s in self.specs.items() if s.budgeted}

    # -- the gate ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def call(self, name: str, *, tokens: int = 0) -> AsyncIterator[None]:
        """Around one provider call: wait for the circuit and the budget, then record
        what the call did to the circuit. Raises :class:`ProviderUnavailable` (without
        calling) while the circuit is open and this call is not the probe."""
        if name not in self.specs:
            yield
            return
        probe = await self._admit(name)
        try:
            budget = self._budgets.get(name)
            # The reservation's round trip also brought the circuit's failure count.
            fresh = budget is not None
            asked_at = time.monotonic()
            if budget is not None:
                await budget.wait_turn(tokens)
            waited_s = time.monotonic() - asked_at
            annotate(
                trace.get_current_span(), {"provider.probe": probe, "provider.wait_s": waited_s}
            )
            try:
                yield
            except RateLimited as exc:
                await self._recorded(self._rate_limited(name, exc))
                raise
            except ProviderUnavailable:
                raise
            except TransientError as exc:
                await self._recorded(self._failed(name, exc, probe))
                raise
            except PermanentError:  # the provider answered
                await self._recorded(self._succeeded(name, probe, fresh))
                raise
            await self._recorded(self._succeeded(name, probe, fresh))
        finally:
            if probe:
                self._probing.discard(name)

    @staticmethod
    async def _recorded(bookkeeping: Awaitable[None]) -> None:
        """Record a call's outcome; best effort, so that the database going away does not
        throw away an answer the provider already gave (and was paid for)."""
        try:
            await bookkeeping
        except CONNECTION_ERRORS as exc:
            log.warning("could not record a provider call's outcome: %s", one_line(str(exc)))

    async def _admit(self, name: str) -> bool:
        """True if this call is the probe; raises if the circuit keeps it out."""
        state = self.board.get(name)
        if state is None or state.state == "closed":
            return False
        if name not in self._probing and self._due(state):
            row = await self.fetchrow(
                name,
                "take_probe",
                name,
                self.owner,
                self.circuit.probe_s,
                self.circuit.probe_max_s,
                None,
            )
            if row is not None:
                self._probing.add(name)
                state.state, state.next_probe_at = "half_open", row["next_probe_at"]
                STATE.labels(name).set(1)
                log.info("provider %s: half-open, sending one probe", name)
                return True
            await self.refresh()
            state = self.board.get(name, state)
        raise ProviderUnavailable(state.waiting_line())

    async def _failed(self, name: str, exc: TransientError, probe: bool) -> None:
        row = await self.fetchrow(
            name,
            "record_failure",
            name,
            one_line(exc.message, 300),
            self.circuit.failures,
            self.circuit.probe_s,
            self.circuit.probe_max_s,
            None,
        )
        if row is None:
            return
        self.saw(name, row)
        if row["old_state"] != row["state"]:
            what = "probe failed" if probe else f"{row['failures']} failures in a row"
            log.warning(
                "provider %s: circuit open (%s: %s); next probe at %s",
                name,
                what,
                one_line(exc.message, 200),
                f"{row['next_probe_at']:%H:%M:%S}",
            )

    async def _succeeded(self, name: str, probe: bool, fresh: bool) -> None:
        """Reset the fleet's count of failures in a row (and close the circuit). Skipped
        when the board, fresh from this call's reservation, shows nothing to reset;
        without a budget it costs a round trip that writes only if needed."""
        state = self.board.get(name)
        nothing = state is None or (state.state == "closed" and not state.failures)
        if fresh and nothing and not probe:
            return
        row = await self.fetchrow(name, "record_success", name, None)
        if state is not None:
            state.state, state.failures, state.failing_since = "closed", 0, None
            STATE.labels(name).set(0)
        if row is not None and row["old_state"] != "closed":
            log.warning("provider %s: circuit closed (a call succeeded)", name)

    async def _rate_limited(self, name: str, exc: RateLimited) -> None:
        if exc.retry_after_s:
            await self.fetchrow(name, "pause_provider", name, exc.retry_after_s, None)
        await self._succeeded(name, False, False)  # a 429 is an answer: the provider is up
