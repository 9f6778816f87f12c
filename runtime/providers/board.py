"""The providers' board: each provider's circuit as this process last saw it, kept fresh.

The claim loop asks it how many jobs a stage may take (:meth:`ProviderBoard.claimable`);
:class:`runtime.providers.gate.Providers` adds the gate that every call passes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
from prometheus_client import Gauge

from runtime.jobs.postgres import Pool
from runtime.providers.specs import CircuitConfig, P, ProviderSpec, ProviderState, provider_states

# Transitions are the providers' story: logged under runtime.providers.specs, where readers look.
log = logging.getLogger("runtime.providers.specs")

STATE = Gauge(
    "ragline_provider_state",
    "Circuit of a provider as this process last saw it: 0 closed, 1 half-open, 2 open",
    ["provider"],
)
_STATE_VALUE = {"closed": 0, "half_open": 1, "open": 2}


def _now() -> datetime:
    return datetime.now(UTC)


class ProviderBoard:
    """This process's view of its stages' providers' circuits, as the fleet last wrote them."""

    def __init__(
        self,
        pool: Pool,
        owner: str,
        stages: Mapping[str, Sequence[ProviderSpec]],
        circuit: CircuitConfig | None = None,
    ) -> None:
        self.pool = pool
        self.owner = owner
        self.circuit = circuit or CircuitConfig()
        self.specs: dict[str, ProviderSpec] = {}
        self.of_stage: dict[str, tuple[str, ...]] = {}
        for stage, specs in stages.items():
            self.of_stage[stage] = tuple(s.name for s in specs)
            for spec in specs:
                self.specs.setdefault(spec.name, spec)
        self.board: dict[str, ProviderState] = {}
        self._changed = anyio.Event()
        self._trips: dict[str, int] = dict.fromkeys(self.specs, 0)
        #: Providers whose probe call this process is making now.
        self._probing: set[str] = set()

    @property
    def active(self) -> bool:
        return bool(self.specs)

    def round_trips(self, name: str) -> int:
        """Statements this process's calls to ``name`` have cost so far (benchmarks)."""
        return self._trips.get(name, 0)

    async def fetchrow(self, name: str, query: str, *args: Any) -> Any:
        self._trips[name] = self._trips.get(name, 0) + 1
        return await self.pool.fetchrow(P[query], *args)

    # -- the fleet's view -------------------------------------------------------------

    async def register(self) -> None:
        pairs = [(n, stage) for stage, names in self.of_stage.items() for n in names]
        if pairs:
            await self.pool.execute(
                P["register_providers"], [n for n, _ in pairs], [s for _, s in pairs]
            )
        await self.refresh()

    async def refresh(self) -> None:
        for state in await provider_states(self.pool):
            if state.name in self.specs:
                self.board[state.name] = state
                STATE.labels(state.name).set(_STATE_VALUE.get(state.state, 0))

    def changed(self) -> None:
        """Another process changed a circuit (NOTIFY): refresh now."""
        self._changed.set()

    async def run(self, every_s: float, wake: Callable[[], None]) -> None:
        """Keep the board fresh: on NOTIFY, else every ``every_s``; ``wake`` the claim
        loops when a circuit changed state."""
        while True:
            with anyio.move_on_after(every_s):
                await self._changed.wait()
            self._changed = anyio.Event()
            before = {n: s.state for n, s in self.board.items()}
            await self.refresh()
            if before != {n: s.state for n, s in self.board.items()}:
                wake()

    def saw(self, name: str, row: Mapping[str, Any]) -> None:
        """Fold circuit columns a statement returned into the board."""
        state = self.board.get(name)
        if state is None:
            return
        for key in ("state", "failures", "next_probe_at", "probe_owner", "failing_since"):
            if key in row:
                setattr(state, key, row[key])
        STATE.labels(name).set(_STATE_VALUE.get(state.state, 0))

    # -- what the claim loop asks ----------------------------------------------------

    def claimable(self, stage: str, free: int) -> int:
        """How many jobs of ``stage`` to claim now: all free slots while its providers'
        circuits are closed, one when a probe is due, else none."""
        blocking = self._blocking(stage)
        if not blocking:
            return free
        return min(free, 1) if all(self._due(s) for s in blocking) else 0

    def blocked(self, stage: str) -> bool:
        return bool(self._blocking(stage))

    def wait_s(self, stage: str, default_s: float) -> float:
        """How long a blocked stage's claim loop may sleep before a probe is due."""
        dues = [s.next_probe_at for s in self._blocking(stage) if s.next_probe_at]
        if not dues:
            return default_s
        left = (max(dues) - _now()).total_seconds()
        return min(default_s, max(0.05, left))

    def _blocking(self, stage: str) -> list[ProviderState]:
        names = self.of_stage.get(stage, ())
        return [s for n in names if (s := self.board.get(n)) is not None and s.state != "closed"]

    @staticmethod
    def _due(state: ProviderState) -> bool:
        return state.next_probe_at is None or state.next_probe_at <= _now()
