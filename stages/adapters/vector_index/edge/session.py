"""Sessions of the embedded vector index: who may open a qdrant-edge shard, and for how long.

Used by :class:`stages.adapters.vector_index.edge.index.EdgeIndex`. A shard is open in one
process at a time, under an exclusive ``fcntl.flock`` on ``<collection>.lock``; a process's
consecutive operations share one session (lock held, shard open). Others say they want it
with a shared flock on a ``.waiting`` or ``.queued`` marker: a wanted session ends between
``min_hold_s`` and ``max_hold_s``, an unwanted one once idle ``idle_keep_s``. Index jobs
snooze to an indexer's session (marked ``.indexing``) instead of waiting. Why, hand-overs
and durability: docs/architecture.md, "The embedded index with several worker processes".
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import msgspec
import qdrant_edge as qe

from runtime.api import ConfigurationError
from stages.adapters.vector_index.edge.space import ensure_room
from stages.ports.vector_index import (
    DEFAULT_BATCH,
    missing_vector_collection,
)

__all__ = ["EdgeIndexConfig", "Session", "Sessions", "is_wanted", "lock_collection"]

T = TypeVar("T")

log = logging.getLogger(__name__)

#: How often a process that handed its session over looks whether the waiters have it.
_HANDOVER_POLL_S = 0.002


class EdgeIndexConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings for :class:`EdgeIndex`; ``root`` is usually ``data_dir / "qdrant"``.

    A session (shard open, flock held) lasts while this process uses it. When another
    process waits for the collection, the session ends once it has been open
    ``min_hold_s`` and idle ``idle_close_s``, or at its next operation once open
    ``max_hold_s`` (``batch_min_hold_s`` and ``batch_max_hold_s`` when the waiting
    processes only want to write documents); after handing it over, this process waits
    until the waiting ones took the lock (at most ``handover_wait_s``), after any other
    release ``yield_s``, before locking again. With nobody waiting it ends after
    ``idle_keep_s`` idle, and it flushes at least every ``flush_every_s`` while it lasts.
    """

    root: Path
    batch_size: int = DEFAULT_BATCH
    idle_close_s: float = 0.05
    min_hold_s: float = 1.0
    max_hold_s: float = 2.0
    batch_min_hold_s: float = 1.0
    batch_max_hold_s: float = 2.0
    idle_keep_s: float = 2.0
    flush_every_s: float = 1.0
    yield_s: float = 0.005
    handover_wait_s: float = 0.25

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise ConfigurationError("EdgeIndexConfig.batch_size must be positive")
        times = [v for k, v in msgspec.structs.asdict(self).items() if k.endswith("_s")]
        if min(times) < 0:
            raise ConfigurationError("EdgeIndexConfig times must not be negative")


def lock_collection(lock: Path, waiting: Path) -> int:
    """Take the exclusive ``flock`` on ``lock`` (waiting for it) and return its fd; closing
    the fd, or the process dying, releases it.

    While it waits, the caller holds a shared flock on ``waiting``, so the holder can tell
    that someone wants the collection (:func:`is_wanted`) and let go soon.
    """
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        marker = os.open(waiting, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(marker, fcntl.LOCK_SH)
            fcntl.flock(fd, fcntl.LOCK_EX)
        finally:
            os.close(marker)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _markers(path: Path) -> tuple[Path, Path]:
    """The files a process waiting for the collection at ``path`` holds a shared flock
    on: ``.waiting`` (any operation), ``.queued`` (an index job's write, in no hurry)."""
    return path.with_name(f"{path.name}.waiting"), path.with_name(f"{path.name}.queued")


def _indexing_marker(path: Path) -> Path:
    return path.with_name(f"{path.name}.indexing")


def is_wanted(waiting: Path) -> bool:
    """Whether another process waits in :func:`lock_collection` for this collection."""
    try:
        marker = os.open(waiting, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(marker)  # also drops the probe's own lock
    return False


class Session:
    """One collection's flock, and its shard once loaded; used under the collection's guard."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        self.waiting, self.queued = _markers(path)
        self.shard: qe.EdgeShard | None = None
        self.opened_at = self.used_at = self.flushed_at = time.monotonic()
        self.dirty = False
        self.timer: threading.Timer | None = None
        self.indexing_fd: int | None = None

    def mark_indexing(self) -> None:
        """Say, while this session lasts, that its process runs index jobs (a shared flock
        on ``.indexing``): other processes' index jobs then snooze instead of waiting."""
        if self.indexing_fd is None:
            fd = os.open(_indexing_marker(self.path), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_SH)
            self.indexing_fd = fd

    def handover_due(self, config: EdgeIndexConfig, *, idle: bool) -> bool:
        """Whether another process waits for the collection and has waited long enough:
        this session has been open its minimum hold (``idle``) or its maximum one."""
        held_s = time.monotonic() - self.opened_at
        if idle:
            hold_s, batch_hold_s = config.min_hold_s, config.batch_min_hold_s
        else:
            hold_s, batch_hold_s = config.max_hold_s, config.batch_max_hold_s
        return (held_s >= hold_s and is_wanted(self.waiting)) or (
            held_s >= batch_hold_s and is_wanted(self.queued)
        )

    def get(self) -> qe.EdgeShard | None:
        """The shard, loaded on first use; None if the collection was never created."""
        if self.shard is None and self.path.is_dir():
            self.shard = qe.EdgeShard.load(str(self.path))
        return self.shard

    def require(self, vector_collection: str) -> qe.EdgeShard:
        shard = self.get()
        if shard is None:
            raise missing_vector_collection(vector_collection)
        return shard

    def write(self, vector_collection: str, operations: Iterable[qe.UpdateOperation]) -> None:
        shard = self.require(vector_collection)
        ensure_room(self.path)  # a write into a sparse mapping on a full disk is SIGBUS
        for operation in operations:
            self.dirty = True  # set first: a failed update may still have reached the WAL
            shard.update(operation)

    def flush_if_older(self, every_s: float) -> None:
        """Bound what an OS crash can lose in a long session to about ``every_s``."""
        if self.dirty and self.shard is not None and time.monotonic() - self.flushed_at >= every_s:
            self.shard.flush()
            self.dirty = False
            self.flushed_at = time.monotonic()

    def close(self) -> None:
        """Flush what this session wrote, close the shard, release the lock."""
        if self.timer is not None:
            self.timer.cancel()
        if self.indexing_fd is not None:
            os.close(self.indexing_fd)
            self.indexing_fd = None
        try:
            if self.shard is not None:
                try:
                    if self.dirty:
                        self.shard.flush()
                finally:
                    self.shard.close()
        finally:
            self.shard = None
            os.close(self.fd)


class Sessions:
    """This process's sessions, at most one per collection, each used by one thread at a
    time (under the collection's guard); see the module docstring for when one ends."""

    def __init__(self, config: EdgeIndexConfig) -> None:
        self.config = config
        # Threads (operations, idle timers, close) touch a collection's session only
        # under its guard, so a shard is never used by two threads at once.
        self._guards: dict[str, threading.Lock] = {}
        self._state = threading.Lock()
        self._open: dict[str, Session] = {}
        self._released_at: dict[str, float] = {}
        self._handed_at: dict[str, float] = {}

    def open_collections(self) -> list[str]:
        return list(self._open)

    def _guard(self, vector_collection: str) -> threading.Lock:
        with self._state:
            return self._guards.setdefault(vector_collection, threading.Lock())

    def run(self, vector_collection: str, fn: Callable[[Session], T], *, batch: bool = False) -> T:
        """``fn`` in the collection's session; ``batch``: an index job's write, which
        lets the process holding the collection keep it longer."""
        with self._guard(vector_collection):
            session = self._session(vector_collection, batch)
            try:
                result = fn(session)
                session.flush_if_older(self.config.flush_every_s)
            except BaseException:
                # The shard may be in any state after a failure: start afresh next time.
                self._end_quietly(vector_collection)
                raise
            session.used_at = time.monotonic()
            self._arm(vector_collection, session, self.config.idle_close_s)
            return result

    def try_hold(self, vector_collection: str) -> bool:
        """Hold the collection for an index job's writes; False, without waiting or
        saying this process wants it, when a process that runs index jobs holds it (that
        one takes the job). A reader's hold (search, verify) is waited out as usual."""
        with self._guard(vector_collection):
            session = self._open.get(vector_collection)
            if session is None:
                root = self.config.root
                root.mkdir(parents=True, exist_ok=True)
                fd = os.open(root / f"{vector_collection}.lock", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    session = self._open[vector_collection] = Session(fd, root / vector_collection)
                except BlockingIOError:
                    os.close(fd)
                    if is_wanted(_indexing_marker(root / vector_collection)):
                        return False
                    session = self._session(vector_collection, batch=True)
                self._arm(vector_collection, session, self.config.idle_close_s)
            session.mark_indexing()
            return True

    def _session(self, vector_collection: str, batch: bool) -> Session:
        """The open session, or a new one; a session held ``max_hold_s`` is ended first
        when another process waits, so it gets its turn."""
        config = self.config
        session = self._open.get(vector_collection)
        if session is not None:
            if not session.handover_due(config, idle=False):
                return session
            self._end(vector_collection, handover=True)
        root = config.root
        root.mkdir(parents=True, exist_ok=True)
        self._wait_turn(vector_collection, root / vector_collection)
        waiting, queued = _markers(root / vector_collection)
        fd = lock_collection(root / f"{vector_collection}.lock", queued if batch else waiting)
        session = self._open[vector_collection] = Session(fd, root / vector_collection)
        return session

    def _wait_turn(self, vector_collection: str, path: Path) -> None:
        """flock is not fair: re-locking at once could starve a process that waits for
        it. After a hand-over, wait until the waiting processes have the lock (each drops
        its marker once it has it, or when it dies) or ``handover_wait_s`` passed; after
        another release, ``yield_s``."""
        config, now = self.config, time.monotonic()
        handed_at = self._handed_at.pop(vector_collection, None)
        if handed_at is not None:
            deadline = handed_at + config.handover_wait_s
            while now < deadline and any(map(is_wanted, _markers(path))):
                time.sleep(min(_HANDOVER_POLL_S, deadline - now))
                now = time.monotonic()
        pause = self._released_at.get(vector_collection, -math.inf) + config.yield_s
        if pause > now:
            time.sleep(pause - now)

    def _end(self, vector_collection: str, *, handover: bool = False) -> None:
        session = self._open.pop(vector_collection)
        try:
            session.close()
        finally:
            self._released_at[vector_collection] = time.monotonic()
            if handover:
                self._handed_at[vector_collection] = time.monotonic()

    def _end_quietly(self, vector_collection: str, *, handover: bool = False) -> None:
        try:
            self._end(vector_collection, handover=handover)
        except Exception:  # the operation's own error is the one worth reporting
            log.warning("closing embedded vector index %s failed", vector_collection, exc_info=True)

    def _arm(self, vector_collection: str, session: Session, delay_s: float) -> None:
        if session.timer is not None and session.timer.is_alive():
            return  # it re-arms itself for the rest of the idle time when it fires
        session.timer = threading.Timer(delay_s, self._on_timer, (vector_collection, session))
        session.timer.daemon = True  # a dying process releases the flock anyway
        session.timer.start()

    def _on_timer(self, vector_collection: str, session: Session) -> None:
        """While ``session`` is idle: end it if another process waits for it (after
        ``min_hold_s``) or nobody used it for ``idle_keep_s``; else look again later."""
        config = self.config
        with self._guard(vector_collection):
            if self._open.get(vector_collection) is not session:
                return  # already ended (max hold, failure, aclose)
            session.timer = None
            now = time.monotonic()
            idle_s = now - session.used_at
            if idle_s < config.idle_close_s:
                self._arm(vector_collection, session, config.idle_close_s - idle_s)
                return
            if session.handover_due(config, idle=True):
                self._end_quietly(vector_collection, handover=True)
                return
            if idle_s >= config.idle_keep_s:
                self._end_quietly(vector_collection)
                return
            try:
                session.flush_if_older(config.flush_every_s)
            except Exception:
                log.warning(
                    "flushing embedded vector index %s failed", vector_collection, exc_info=True
                )
                self._end_quietly(vector_collection)
                return
            self._arm(vector_collection, session, config.idle_close_s)

    def close_now(self, vector_collection: str) -> None:
        with self._guard(vector_collection):
            if vector_collection in self._open:
                self._end(vector_collection)  # aclose lets the caller see a failed flush
