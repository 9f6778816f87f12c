"""``ragline sync`` against what a real machine throws at it (issue 39): a folder whose
disk went away (an empty mount point, another device), FIFOs, sockets and devices among
its files, a folder it may not read, Ctrl-C while it reads a huge file, an S3 endpoint
that is down or refuses the keys, and the same file reaching one collection twice (a
submitted folder synced, nested sources, two copies in one folder).

Each runs ``python -m runtime sync`` in a subprocess on real files: a real tmpfs mount
unmounted under the source, ``os.mkfifo``, a bound UNIX socket, a directory made
unreadable to a process without ``CAP_DAC_OVERRIDE`` (the tests run as root, whom a
``chmod 000`` does not stop: the sync runs under ``setpriv`` with those capabilities out
of its bounding set), a sparse file of tens of GiB, a second moto server that checks keys.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

import pytest

from bench.harness.cli import Cli, Result, Running, cli_env
from bench.harness.db import sql
from bench.harness.procs import wait_for
from runtime.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from tests.acceptance.test_sync import QUIET, synced, write_pdf
from tests.support.s3 import S3Server, closed_port

GiB = 1 << 30


@pytest.fixture
def cli(cohere_cli: Cli) -> Cli:
    return cohere_cli


def count(dsn: str, query: str, *args: object) -> int:
    return int(sql(dsn, query, *args)[0][0])


def one_line_about(result: Result, *words: str) -> str:
    """The one line on stderr that names every word (and no traceback)."""
    assert "Traceback" not in result.err, result
    lines = [line for line in result.err_lines if all(w in line for w in words)]
    assert len(lines) == 1, result
    return lines[0]


# -- item 3: deletes need evidence -------------------------------------------------------


def test_emptied_folder_deletes_nothing_without_allow_deletes(
    cli: Cli, dsn: str, tmp_path: Path
) -> None:
    """An empty folder (a mount point left behind by an unmounted disk) would delete
    every document: refused in one line with the count, nothing changed, exit 1; with
    ``--allow-deletes`` the deletions go. One document alone is refused too (the rule
    on "everything" has no minimum)."""
    src, aside = tmp_path / "src", tmp_path / "aside"
    for i in range(6):
        write_pdf(src / f"sub/m{i}.pdf" if i % 2 else src / f"m{i}.pdf", f"moles dig {i} runs")
    synced(cli, str(src))
    ids = sorted(r[0] for r in sql(dsn, "SELECT id FROM documents"))
    shutil.move(src, aside)
    src.mkdir()  # the mount point, empty

    plan = cli.run("sync", str(src), "--dry-run", "--json")
    assert plan.code == EXIT_FAILED, plan
    one_line_about(plan, "6 of 6", "--allow-deletes")
    refused = cli.run("sync", str(src), QUIET)
    assert refused.code == EXIT_FAILED, refused
    line = one_line_about(refused, "6 of 6", "--allow-deletes")
    assert "empty" in line, line
    assert sorted(r[0] for r in sql(dsn, "SELECT id FROM documents")) == ids
    assert count(dsn, "SELECT count(*) FROM source_tombstones") == 0
    assert count(dsn, "SELECT count(*) FROM documents WHERE status = 'ready'") == 6

    allowed = synced(cli, str(src), "--allow-deletes").json()
    assert allowed["counts"]["deleted"] == 6
    assert count(dsn, "SELECT count(*) FROM documents") == 0

    lone = tmp_path / "lone"
    write_pdf(lone / "l.pdf", "a lone lapwing")
    synced(cli, str(lone))
    (lone / "l.pdf").unlink()
    result = cli.run("sync", str(lone), QUIET)
    assert result.code == EXIT_FAILED, result
    one_line_about(result, "1 of 1", "--allow-deletes")
    assert count(dsn, "SELECT count(*) FROM documents") == 1


def test_watch_says_the_refusal_once_and_keeps_watching(cli: Cli, dsn: str, tmp_path: Path) -> None:
    """Under ``--watch`` the folder empties (the disk went): one line, nothing deleted,
    and the watch goes on; the files come back and a new one is synced."""
    src, aside = tmp_path / "src", tmp_path / "aside"
    for i in range(3):
        write_pdf(src / f"w{i}.pdf", f"wigeons graze the marsh {i}")
    watching = cli.start("sync", str(src), "--watch", QUIET, RAGLINE_SYNC_POLL_S="1")
    try:
        ready = "SELECT count(*) FROM documents WHERE status = 'ready'"
        wait_for(lambda: count(dsn, ready) == 3, timeout_s=90, what="the first sync")
        aside.mkdir()
        for f in src.iterdir():
            shutil.move(f, aside / f.name)
        said = "refusing to delete 3 of 3"
        wait_for(lambda: said in watching.stderr(), timeout_s=30, what="the refusal")
        time.sleep(3)  # three more listings (RAGLINE_SYNC_POLL_S=1): said once only
        assert watching.stderr().count(said) == 1, watching.stderr()
        assert watching.poll() is None and count(dsn, "SELECT count(*) FROM documents") == 3
        for f in aside.iterdir():
            shutil.move(f, src / f.name)
        write_pdf(src / "w3.pdf", "wigeons whistle at dusk")
        # Its report printed: the in-process worker is gone (a Ctrl-C as it finishes its
        # last document is taken by its signal receiver and lost: not sync's to fix).
        wait_for(lambda: "new w3.pdf" in watching.stdout(), timeout_s=60, what="the sync")
        assert count(dsn, ready) == 4
    finally:
        watching.signal(signal.SIGINT)
        result = watching.wait()
    assert result.code == EXIT_INTERRUPTED, result
    assert count(dsn, "SELECT count(*) FROM source_tombstones") == 0


@pytest.fixture
def mount_point(tmp_path: Path) -> Iterator[Path]:
    """A folder with a tmpfs mounted on it (unmounted by the test or at teardown)."""
    point = tmp_path / "disk"
    point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "ragline-test", point])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)")
    try:
        yield point
    finally:
        subprocess.run(["umount", point], capture_output=True)


def test_folder_on_another_device_deletes_nothing(
    cli: Cli, dsn: str, tmp_path: Path, mount_point: Path
) -> None:
    """A disk unmounted under the source, and a file written into the bare mount point
    meanwhile: the folder is not empty, but its device changed since the last sync, and
    7 of its 8 documents would go: refused, nothing deleted. A deletion of one file on
    the same device goes as before."""
    for i in range(8):
        write_pdf(mount_point / f"v{i}.pdf", f"voles nest under {i} stones")
    synced(cli, str(mount_point))
    kept = tmp_path / "v0.pdf"
    shutil.copy2(mount_point / "v0.pdf", kept)
    assert subprocess.run(["umount", mount_point]).returncode == 0
    shutil.copy2(kept, mount_point / "v0.pdf")  # written into the bare mount point

    refused = cli.run("sync", str(mount_point), QUIET)
    assert refused.code == EXIT_FAILED, refused
    line = one_line_about(refused, "7 of 8", "--allow-deletes")
    assert "device" in line, line
    assert count(dsn, "SELECT count(*) FROM documents") == 8
    assert count(dsn, "SELECT count(*) FROM source_tombstones") == 0

    plain = tmp_path / "plain"
    for i in range(3):
        write_pdf(plain / f"p{i}.pdf", f"plovers {i}")
    synced(cli, str(plain))
    (plain / "p1.pdf").unlink()
    assert synced(cli, str(plain)).json()["counts"]["deleted"] == 1


# -- items 5 and 11: special files, unreadable folders, Ctrl-C ------------------------------


def special_files(src: Path) -> None:
    os.mkfifo(src / "pipe.pdf")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(src / "sock.pdf"))
    sock.close()  # the socket file stays
    (src / "null.pdf").symlink_to("/dev/null")


def test_fifo_socket_and_device_are_skipped(cli: Cli, dsn: str, tmp_path: Path) -> None:
    """A FIFO is never opened (opening one waits for a writer: sync hung forever); it, a
    socket and a link to a device are skipped with one line each saying what they are,
    and ``--dry-run`` does not list them as new."""
    src = tmp_path / "src"
    write_pdf(src / "a.pdf", "avocets sweep the shallows")
    special_files(src)

    plan = cli.run("sync", str(src), "--dry-run", "--json", timeout_s=30)
    assert plan.json()["counts"]["new"] == 1, plan
    assert plan.json()["files"]["new"] == ["a.pdf"]
    running = cli.start("sync", str(src), QUIET)
    try:
        result = running.wait(timeout_s=60)
    finally:
        running.kill()
    assert result.code == EXIT_FAILED, result  # something was skipped
    one_line_about(result, "pipe.pdf", "FIFO")
    one_line_about(result, "sock.pdf", "socket")
    one_line_about(result, "null.pdf", "device")
    assert [r[0] for r in sql(dsn, "SELECT source_uri FROM documents")] == ["a.pdf"]
    assert count(dsn, "SELECT count(*) FROM documents WHERE status = 'ready'") == 1


def test_submit_of_a_fifo_says_what_it_is(cli: Cli, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.pdf"
    os.mkfifo(fifo)
    result = cli.run("submit", str(fifo), timeout_s=30)
    assert result.code == EXIT_FAILED, result
    line = one_line_about(result, "pipe.pdf")
    assert "FIFO" in line and "no such file" not in line, line


@contextlib.contextmanager
def reachable_without_dac(dsn: str) -> Iterator[str]:
    """``dsn`` for a process without root's DAC override. An embedded server's socket is
    in a folder only the server's user may enter: this process (root) relays TCP on the
    loopback to it (the server still sees a local connection). Other DSNs as they are."""
    url = urlsplit(dsn)
    query = parse_qs(url.query)
    host = query.get("host", [""])[0]
    if not host.startswith("/"):
        yield dsn
        return
    target = f"{host}/.s.PGSQL.{query['port'][0]}"
    listener = socket.create_server(("127.0.0.1", 0))
    opened: list[socket.socket] = []

    def pump(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            upstream = socket.socket(socket.AF_UNIX)
            opened.extend((client, upstream))
            upstream.connect(target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    port = listener.getsockname()[1]
    try:
        yield urlunsplit(("postgresql", f"{url.username}@127.0.0.1:{port}", url.path, "", ""))
    finally:
        listener.close()
        for sock in opened:
            sock.close()


def test_unreadable_subdirectory_is_skipped(cli: Cli, dsn: str, tmp_path: Path) -> None:
    """A folder the sync may not read is skipped with one line; the rest of the source
    syncs, and the documents of the files under it stay (they are not "deleted")."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop root's DAC override")
    src = tmp_path / "src"
    write_pdf(src / "a.pdf", "auks on the cliff")
    write_pdf(src / "locked/b.pdf", "bitterns in the reeds")
    synced(cli, str(src))
    write_pdf(src / "c.pdf", "coots on the canal")
    (src / "locked").chmod(0)
    try:
        with reachable_without_dac(cli.dsn) as dsn_for_it:
            bare = Cli(dsn_for_it, cli.data_dir, cli.logs, **cli.env)
            caps = "-dac_override,-dac_read_search"  # as a user: modes stop it
            argv = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]
            argv += bare.argv("sync", str(src), QUIET, "--json")
            result = Running(argv, cli_env(**cli.env), cli.logs, 900).wait(timeout_s=90)
    finally:
        (src / "locked").chmod(0o755)
    assert result.code == EXIT_FAILED, result
    one_line_about(result, "locked", "Permission denied")
    assert result.json()["counts"]["new"] == 1 and result.json()["counts"]["deleted"] == 0
    uris = {r[0] for r in sql(dsn, "SELECT source_uri FROM documents WHERE status = 'ready'")}
    assert uris == {"a.pdf", "locked/b.pdf", "c.pdf"}


def fd_open_on(pid: int, path: Path) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


def interrupted_within(running: Running, path: Path, limit_s: float) -> tuple[Result, float]:
    """SIGINT once ``running`` has ``path`` open; its result and how long it took to exit."""
    try:
        wait_for(lambda: fd_open_on(running.proc.pid, path), timeout_s=60, what="the read")
        assert running.poll() is None
        running.signal(signal.SIGINT)
        started = time.monotonic()
        result = running.wait(timeout_s=limit_s + 8)
        return result, time.monotonic() - started
    finally:
        running.kill()


def sparse(path: Path, size: int, head: bytes = b"") -> None:
    with path.open("r+b" if path.exists() else "wb") as f:
        f.write(head)
        f.truncate(size)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_sigint_while_hashing_stops_within_a_second(cli: Cli, tmp_path: Path) -> None:
    """A known file grows to 40 GiB (sparse: reading it costs CPU, not disk), so the
    plan hashes it for tens of seconds; Ctrl-C then stops sync at once with one line."""
    src = tmp_path / "src"
    big = write_pdf(src / "big.pdf", "bustards on the steppe")
    synced(cli, str(src))
    sparse(big, 40 * GiB)
    running = cli.start("sync", str(src), QUIET)
    result, took_s = interrupted_within(running, big, limit_s=2)
    assert took_s < 2, (took_s, result)
    assert result.code == EXIT_INTERRUPTED, result
    assert result.err_lines == ["ragline: interrupted"], result


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_sigint_while_storing_stops_within_a_second(cli: Cli, tmp_path: Path) -> None:
    """A new 20 GiB file (a PDF header, then a hole) is being stored: Ctrl-C stops sync
    at once with one line, and no partial object stays in the asset store."""
    src = tmp_path / "src"
    src.mkdir()
    huge = src / "huge.pdf"
    sparse(huge, 20 * GiB, head=b"%PDF-1.7\n")
    running = cli.start("sync", str(src), QUIET)
    result, took_s = interrupted_within(running, huge, limit_s=2)
    assert took_s < 2, (took_s, result)
    assert result.code == EXIT_INTERRUPTED, result
    assert result.err_lines == ["ragline: interrupted"], result
    stored = [p for p in (cli.data_dir / "assets").rglob("*") if p.is_file()]
    assert not [p for p in stored if p.stat().st_size > 1 << 20], stored


# -- item 14: --watch --dry-run ------------------------------------------------------------


def test_watch_with_dry_run_is_refused(cli: Cli, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_pdf(src / "a.pdf", "avocets")
    result = cli.run("sync", str(src), "--watch", "--dry-run", timeout_s=30)
    assert result.code == EXIT_USAGE, result
    assert len(result.err_lines) == 1, result
    assert "--watch" in result.err and "--dry-run" in result.err, result


# -- item 10: S3 errors in one line --------------------------------------------------------


def s3_env(cli: Cli, endpoint: str, key: str = "testing", secret: str = "testing") -> Cli:
    env = {**cli.env, "MINIO_ENDPOINT": endpoint, "MINIO_ACCESS_KEY": key}
    env.update(MINIO_SECRET_KEY=secret, MINIO_BUCKET="sync-assets")
    return Cli(cli.dsn, cli.data_dir, cli.logs, **env)


def test_s3_endpoint_down_is_one_line(cli: Cli) -> None:
    down = s3_env(cli, f"127.0.0.1:{closed_port()}")
    started = time.monotonic()
    result = down.run("sync", "s3://bucket/docs/", QUIET, timeout_s=60)
    assert result.code == EXIT_UNAVAILABLE, result
    assert len(result.err_lines) == 1, result
    one_line_about(result, "s3://bucket/docs/")
    assert time.monotonic() - started < 20


def test_s3_missing_bucket_is_one_line(cli: Cli, s3_server: S3Server) -> None:
    result = s3_env(cli, s3_server.endpoint).run("sync", "s3://no-such-bucket/", QUIET)
    assert result.code == EXIT_USAGE, result
    assert len(result.err_lines) == 1, result
    one_line_about(result, "no-such-bucket")


@pytest.fixture
def s3_with_keys(tmp_path: Path) -> Iterator[str]:
    """A moto server of its own that checks access keys (none are valid)."""
    port = closed_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with (tmp_path / "moto.err").open("wb") as err:
        server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for(lambda: _listening(port), timeout_s=30, what="moto")
            yield f"127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait(10)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_s3_bad_credentials_are_one_line(cli: Cli, s3_with_keys: str) -> None:
    result = s3_env(cli, s3_with_keys, "wrong", "wrong").run("sync", "s3://bucket/", QUIET)
    assert result.code == EXIT_USAGE, result
    assert len(result.err_lines) == 1, result
    one_line_about(result, "MINIO_ACCESS_KEY")


# -- item 8: one file, one document per collection ----------------------------------------


def hits_per_text(cli: Cli) -> dict[str, set[str]]:
    result = cli.run("search", "anything", "-k", "1000", "--json")
    assert result.code == EXIT_OK, result
    found: dict[str, set[str]] = {}
    for hit in result.json():
        found.setdefault(hit["text"], set()).add(hit["document_id"])
    return found


def test_submitted_folder_synced_is_adopted(cli: Cli, dsn: str, tmp_path: Path) -> None:
    """``submit DIR`` then ``sync DIR``: the source adopts each submitted document of the
    same bytes (no second document, no stage runs again); it is then the source's (a
    deleted file deletes it). The other way round, ``submit`` finds the synced document."""
    src = tmp_path / "src"
    for name in ("a", "b", "c"):
        write_pdf(src / f"{name}.pdf", f"{name}: dippers dive in the stream {name * 3}")
    submitted = cli.run("submit", str(src), "--json")
    assert submitted.code == EXIT_OK, submitted
    ids = {s["document_id"] for s in submitted.json()["submitted"]}

    report = synced(cli, str(src)).json()
    assert report["counts"]["new"] == 0 and report["counts"]["adopted"] == 3, report
    assert {str(r[0]) for r in sql(dsn, "SELECT id FROM documents")} == ids
    assert count(dsn, "SELECT count(*) FROM documents WHERE source_id IS NOT NULL") == 3
    assert count(dsn, "SELECT count(*) FROM documents WHERE status = 'ready'") == 3
    assert all(len(docs) == 1 for docs in hits_per_text(cli).values())

    (src / "b.pdf").unlink()
    assert synced(cli, str(src)).json()["counts"]["deleted"] == 1
    assert count(dsn, "SELECT count(*) FROM documents") == 2

    write_pdf(src / "d.pdf", "dunnocks in the hedge")
    synced(cli, str(src))
    [d_id] = [str(r[0]) for r in sql(dsn, "SELECT id FROM documents WHERE source_uri = 'd.pdf'")]
    again = cli.run("submit", str(src / "d.pdf"))
    assert again.code == EXIT_OK and f"already there {src / 'd.pdf'} {d_id}" in again.out, again
    assert count(dsn, "SELECT count(*) FROM documents") == 3


def test_nested_sources_and_copies_are_one_document(cli: Cli, dsn: str, tmp_path: Path) -> None:
    """Two nested sources in one collection: the file under both is the first source's
    document; the second sync skips it with one line naming the owner (exit 0: the file
    is indexed). Two copies in one folder are one document; the copy takes over (a
    move) when the first goes."""
    outer = tmp_path / "outer"
    write_pdf(outer / "o.pdf", "ospreys over the loch")
    write_pdf(outer / "inner/i.pdf", "ibises in the marsh")
    write_pdf(outer / "inner/j.pdf", "jackdaws on the chimney")
    synced(cli, str(outer))
    before = {tuple(r) for r in sql(dsn, "SELECT id, source_uri FROM documents")}

    inner = synced(cli, str(outer / "inner"))
    assert inner.json()["counts"]["new"] == 0, inner
    line = one_line_about(inner, "i.pdf", str(outer.resolve()))
    assert "inner/i.pdf" in line, line
    one_line_about(inner, "j.pdf", str(outer.resolve()))
    assert {tuple(r) for r in sql(dsn, "SELECT id, source_uri FROM documents")} == before
    assert all(len(docs) == 1 for docs in hits_per_text(cli).values())

    shutil.copy2(outer / "o.pdf", outer / "o-copy.pdf")
    copied = synced(cli, str(outer))
    assert copied.json()["counts"]["new"] == 0, copied
    one_line_about(copied, "o-copy.pdf", "o.pdf")
    assert count(dsn, "SELECT count(*) FROM documents") == 3
    (outer / "o.pdf").unlink()
    moved = synced(cli, str(outer)).json()
    assert moved["counts"]["moved"] == 1 and moved["counts"]["deleted"] == 0, moved
    uris = {r[0] for r in sql(dsn, "SELECT source_uri FROM documents")}
    assert uris == {"o-copy.pdf", "inner/i.pdf", "inner/j.pdf"}


def test_a_file_edited_under_nested_sources_stays_one_document(
    cli: Cli, dsn: str, tmp_path: Path
) -> None:
    """The outer source owns the file; it is edited and the inner source syncs first
    (the new bytes are no document yet: the inner one's now). The outer's sync then
    finds its file changed into another document's bytes: its own document goes and the
    file is skipped with one line naming the owner. One document, whatever the order."""
    outer = tmp_path / "outer"
    write_pdf(outer / "inner/k.pdf", "kestrels hover over the verge")
    write_pdf(outer / "l.pdf", "larks rise at dawn")
    synced(cli, str(outer))
    synced(cli, str(outer / "inner"))
    write_pdf(outer / "inner/k.pdf", "kittiwakes nest on the ledge")
    first = synced(cli, str(outer / "inner")).json()
    assert first["counts"]["new"] == 1, first

    second = synced(cli, str(outer))
    assert second.json()["counts"]["changed"] == 0, second
    line = one_line_about(second, "inner/k.pdf", str((outer / "inner").resolve()))
    assert "one document per collection" in line, line
    rows = sql(
        dsn, "SELECT s.uri, d.source_uri FROM documents d JOIN sources s ON s.id = d.source_id"
    )
    assert sorted(tuple(r) for r in rows) == [
        (str(outer.resolve()), "l.pdf"),
        (str((outer / "inner").resolve()), "k.pdf"),
    ]
    assert all(len(docs) == 1 for docs in hits_per_text(cli).values())
    texts = " ".join(hits_per_text(cli))
    assert "kittiwakes" in texts and "kestrels" not in texts
