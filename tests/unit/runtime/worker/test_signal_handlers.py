"""A worker that ends inside a longer command puts the signal handlers back: Ctrl-C after
it (``sync --watch`` between syncs) cancels the command's main task as ``asyncio.run``'s
handler does, instead of raising KeyboardInterrupt inside the event loop."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Run in a process of its own: asyncio.run installs its SIGINT handler only where the
# handler is still Python's default, which pytest's process may not have.
SCRIPT = textwrap.dedent(
    """
    import logging, signal, anyio
    from runtime.worker.watchers import STOP_SIGNALS, signal_loop

    class State:
        def __init__(self):
            self.stopping = anyio.Event()
            self.log = logging.getLogger("test")
        def stop(self):
            self.stopping.set()
        def cancel_inflight(self):
            pass

    async def main():
        before = [signal.getsignal(s) for s in STOP_SIGNALS]
        async with anyio.create_task_group() as tg:
            tg.start_soon(signal_loop, State())
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        after = [signal.getsignal(s) for s in STOP_SIGNALS]
        assert before[1] is not signal.default_int_handler, before
        print("restored" if after == before else f"changed: {before} -> {after}")

    anyio.run(main)
    """
)


def test_the_handlers_from_before_the_worker_are_put_back() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "restored"
