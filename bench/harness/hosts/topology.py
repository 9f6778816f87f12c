"""A multi-host run's layout: which host runs what, their environment, and the cluster
that starts it all (network, PostgreSQL, S3, the fake provider) and tears it down."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import msgspec

from bench.harness.chaos import ChaosConfig, CountingCohere, chaos_env
from bench.harness.fake_cohere import FaultRates
from bench.harness.hosts.servers import S3_KEY, postgres_on, s3_on
from bench.harness.hosts.workers import HostProcess, Submitted, submit_from
from bench.harness.netns import Host, Network
from runtime.db.connect import ensure_schema
from stages.services import Services

#: Worker hosts → their worker's ``--stages``: split sets, each stage served twice but
#: index, which runs only where the index is (the embedded index has one writer).
WORKERS: dict[str, str] = {
    "w1": "parse,chunk",
    "w2": "vision,embed",
    "w3": "parse,chunk,vision,embed",
    "idx": "index",
}
#: Every host: the two shared services, the workers, and the one that submits.
HOSTS = ("db", "s3", *WORKERS, "client")
BUCKET = "ragline"


class HostsConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One multi-host run. Times in seconds."""

    docs: int = 12
    pages: int = 3
    lease_s: float = 3.0
    heartbeat_s: float = 1.0
    rescue_every_s: float = 0.5
    poll_s: float = 0.3
    grace_s: float = 1.0
    retry_base_s: float = 0.2
    dims: int = 64
    #: Every embed call takes this long at the fake provider (so some are in flight).
    embed_delay_s: float = 1.0
    #: How long every document gets to end ready or failed after the fault.
    drain_timeout_s: float = 120.0


class Cluster:
    """The running hosts: start workers and submit on them, read what they did."""

    def __init__(
        self,
        config: HostsConfig,
        net: Network,
        dsn: str,
        s3: str,
        server: CountingCohere,
        root: Path,
    ) -> None:
        self.config = config
        self.net = net
        self.dsn = dsn
        self.s3 = s3
        self.server = server
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.workers: dict[str, HostProcess] = {}
        self.every: list[HostProcess] = []

    def host(self, name: str) -> Host:
        return self.net.hosts[name]

    def data_dir(self, name: str) -> Path:
        return self.root / "hosts" / name

    def env(self, name: str) -> dict[str, str]:
        """What a process on host ``name`` (or the controller, "controller") builds from."""
        c = self.config
        base = ChaosConfig(dims=c.dims, vision="none")
        env = chaos_env(base, self.dsn, self.data_dir(name), self.server.base_url)
        env.update(
            MINIO_ENDPOINT=self.s3,
            MINIO_ACCESS_KEY=S3_KEY,
            MINIO_SECRET_KEY=S3_KEY,
            MINIO_BUCKET=BUCKET,
        )
        return env

    def worker_args(self, stages: str) -> list[str]:
        c = self.config
        args = ["--stages", stages, "--lease", str(c.lease_s), "--heartbeat", str(c.heartbeat_s)]
        args += ["--rescue-every", str(c.rescue_every_s), "--poll", str(c.poll_s)]
        return [*args, "--grace", str(c.grace_s), "--retry-base", str(c.retry_base_s)]

    def start_worker(self, name: str) -> HostProcess:
        log = self.logs / f"worker-{len(self.every):02d}-{name}.log"
        proc = HostProcess(
            self.net, self.host(name), self.worker_args(WORKERS[name]), self.env(name), log
        )
        self.workers[name] = proc
        self.every.append(proc)
        return proc

    def start_workers(self) -> None:
        for name in WORKERS:
            self.start_worker(name)

    def submit(self, paths: list[Path]) -> Submitted:
        """Submit from the client host (the corpus is read there, stored in S3)."""
        log = self.logs / f"submit-{len(list(self.logs.glob('submit-*')))}.log"
        return submit_from(self.net, self.host("client"), self.env("client"), paths, log)

    def stop_workers(self) -> dict[str, int | None]:
        codes = {}
        for name, proc in self.workers.items():
            codes[name] = proc.terminate()
        for proc in self.every:
            proc.stop()
        return codes

    def services(self) -> Services:
        """The pipeline's services as the index host sees them (its embedded index), for
        the controller to count points once the index worker has stopped."""
        return Services(self.env("idx"), self.data_dir("idx"))

    def cut(self, name: str) -> None:
        self.net.cut(self.host(name))

    def restore(self, name: str) -> None:
        self.net.restore(self.host(name))


@contextlib.contextmanager
def cluster(
    config: HostsConfig, root: Path, say: Callable[[str], None] = lambda _s: None
) -> Iterator[Cluster]:
    """Every host up (PostgreSQL migrated, S3 and the provider listening), no workers yet;
    everything stopped and every namespace deleted at exit."""
    rates = FaultRates(slow=1.0, slow_s=config.embed_delay_s) if config.embed_delay_s else None
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with Network.create() as net:
        for name in HOSTS:
            net.add_host(name)
        say(f"hosts {', '.join(HOSTS)} on {net.subnet}.0/24")
        server = CountingCohere(host=net.controller, dims=config.dims, rates=rates).start()
        try:
            with (
                postgres_on(net, net.hosts["db"], logs / "postgres.log") as dsn,
                s3_on(net, net.hosts["s3"], logs / "s3.log") as s3,
            ):
                anyio.run(ensure_schema, dsn)
                run = Cluster(config, net, dsn, s3, server, root)
                try:
                    yield run
                finally:
                    run.stop_workers()
        finally:
            server.stop()
