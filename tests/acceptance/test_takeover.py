"""Same-host lease takeover: a job whose lease owner was a process of this host that no
longer exists is taken at once, not after its lease (issue 10, item 10).

The lease is 600 s and the test waits at most 60 s: only the takeover can finish it.
"""

from __future__ import annotations

from bench.harness.procs import StartWorker
from runtime.process.identity import dead_here, new_worker_id
from tests.support.jobs import effects, job_state, kill_mid_chunk

LONG_LEASE = ("--lease", "600", "--rescue-every", "0.3", "--poll", "0.2")


def test_a_dead_local_workers_job_is_taken_at_once(dsn: str, start_worker: StartWorker) -> None:
    kill_mid_chunk(dsn, start_worker, *LONG_LEASE, sleep_s=600)
    heir = start_worker(dsn, "--stages", "chunk", "--exit-when-idle", *LONG_LEASE)
    assert heir.wait(60) == 0, heir.output()
    assert "lease(s) taken over now" in heir.output()
    assert effects(dsn) == [("chunk", heir.pid)]
    assert job_state(dsn, "chunk") == ("succeeded", 2, 1)  # the lost attempt counts


def test_only_dead_processes_of_this_host_and_namespace() -> None:
    me = new_worker_id()
    host, _pid, tail = me.split(":")
    assert not dead_here(me)  # this process
    assert not dead_here(f"{host}:1:{tail}")  # alive (init)
    assert dead_here(f"{host}:{2**22 + 7}:{tail}")  # above pid_max: never existed
    assert not dead_here(f"other-host:{2**22 + 7}:{tail}")
    ns = tail.partition(".")[0]
    assert not dead_here(f"{host}:{2**22 + 7}:{ns}ff.abc")  # another PID namespace
    assert not dead_here(f"{host}:{2**22 + 7}:abc123")  # an id of the old shape
