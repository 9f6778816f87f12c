"""Private by default (issue 10, defect 8): a data dir made beforehand at 0755 ends 0700
with everything ragline writes in it 0600/0700; metrics bind 127.0.0.1 unless told."""

from __future__ import annotations

import stat
from pathlib import Path

from bench.harness.cli import Cli
from bench.harness.procs import wait_for
from bench.harness.serve import free_port
from runtime.cli.common import EXIT_OK


def listening_on(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) listening on ``port``."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if int(hex_port, 16) == port and state == "0A":  # LISTEN
            found.append(address)
    return found


def test_an_existing_open_data_dir_is_made_private(dsn: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    cli = Cli(dsn, data, tmp_path / "logs")
    result = cli.run("ingest", "samples/lighthouses.pdf")
    assert result.code == EXIT_OK, result
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    made = list(data.rglob("*"))
    assert any(p.name.startswith("original-") for p in made), made
    loose = [
        (str(p), oct(stat.S_IMODE(p.lstat().st_mode)))
        for p in made
        if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077
    ]
    assert loose == []


def test_metrics_bind_loopback_unless_told(dsn: str, tmp_path: Path) -> None:
    cli = Cli(dsn, tmp_path / "data", tmp_path / "logs")
    default, other = free_port(), free_port()
    workers = [
        cli.start("--metrics-port", str(default), "--stages", "index"),
        cli.start(
            "--stages",
            "index",
            RAGLINE_METRICS_PORT=str(other),
            RAGLINE_METRICS_HOST="0.0.0.0",
        ),
    ]
    try:
        wait_for(lambda: bool(listening_on(default)), 60, "the metrics server")
        wait_for(lambda: bool(listening_on(other)), 60, "the metrics server on 0.0.0.0")
        assert listening_on(default) == ["0100007F"]  # 127.0.0.1
        assert listening_on(other) == ["00000000"]
    finally:
        for worker in workers:
            worker.kill()
