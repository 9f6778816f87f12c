"""``ragline sync``: compare a source with what is indexed, then act.

A new file is stored and submitted (typed as submit types it); changed bytes are a new
generation of the same document; the same bytes at another URI a move (no stage runs); a
gone file's points and objects are removed (a tombstone stays); an unchanged size and
mtime cost only a stat. Applying holds the source's lock and makes every step one
transaction or an idempotent delete, so a sync killed midway and run again converges.
Each case, and the guarantees: README, "Sync".
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import anyio
import msgspec

from runtime.api import InvalidDocument, Pool, RaglineError, escape_name
from stages.actions.documents import delete_document
from stages.actions.submit import FIRST_STAGE
from stages.db import sources
from stages.parsing.formats.detect import HEAD_BYTES, Format, detect_bytes
from stages.ports.sources import Entry, Scanner

# The services (and the asset store's minio) are imported only when there is work: an
# unchanged source costs a listing and one query, not seconds of imports.
if TYPE_CHECKING:
    from stages.ports.services import Services

T = TypeVar("T")
#: Files hashed, or stored and recorded, at once (the pool has 10 connections).
APPLY_CONCURRENCY = 8


class Change(msgspec.Struct, frozen=True):
    """A file's planned action; ``document_id`` is None for a new file."""

    uri: str
    document_id: uuid.UUID | None = None
    #: The old URI of a moved file.
    was: str | None = None
    sha256: str | None = None


class Plan(msgspec.Struct, kw_only=True):
    new: list[Change] = msgspec.field(default_factory=list)
    changed: list[Change] = msgspec.field(default_factory=list)
    moved: list[Change] = msgspec.field(default_factory=list)
    deleted: list[Change] = msgspec.field(default_factory=list)
    #: Same bytes, another mtime (the hash said so): only the mtime is recorded.
    touched: list[Change] = msgspec.field(default_factory=list)
    unchanged: int = 0
    #: Files hashed to make the plan.
    hashed: int = 0
    skipped: list[str] = msgspec.field(default_factory=list)
    #: The listing the plan was made from.
    entries: dict[str, Entry] = msgspec.field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Nothing to apply: every file unchanged."""
        return not (self.new or self.changed or self.moved or self.deleted or self.touched)

    def counts(self) -> dict[str, int]:
        return {
            "new": len(self.new),
            "changed": len(self.changed),
            "moved": len(self.moved),
            "deleted": len(self.deleted),
            "unchanged": self.unchanged + len(self.touched),
        }


class Outcome(msgspec.Struct, kw_only=True):
    """What applying a plan did: the documents whose stages now run, and refusals."""

    submitted: list[uuid.UUID] = msgspec.field(default_factory=list)
    refused: list[str] = msgspec.field(default_factory=list)


async def plan(pool: Pool, scanner: Scanner, source_id: int | None) -> Plan:
    """Compare the source's files with its documents; hashes only what a stat cannot
    settle (size or mtime moved; a new file as large as a vanished one)."""
    listing = await scanner.list()
    known = await sources.documents(pool, source_id) if source_id is not None else {}
    out = Plan(skipped=list(listing.skipped), entries=listing.entries)
    moved_stat = []
    for uri, entry in sorted(listing.entries.items()):
        doc = known.get(uri)
        if doc is None:
            continue
        if (entry.size, entry.mtime_ns, entry.etag) == (doc.byte_size, doc.mtime_ns, doc.etag):
            out.unchanged += 1
        else:
            moved_stat.append(uri)
    hashes = await _hash_all(scanner, moved_stat, out)
    for uri in moved_stat:
        doc, sha = known[uri], hashes.get(uri)
        if sha is not None:
            change = Change(uri=uri, document_id=doc.id, sha256=sha)
            (out.touched if sha == doc.sha256 else out.changed).append(change)
    gone = {uri: doc for uri, doc in known.items() if uri not in listing.entries}
    fresh = sorted(uri for uri in listing.entries if uri not in known)
    await _match_moves(scanner, listing.entries, gone, fresh, out)
    out.deleted = [Change(uri=u, document_id=d.id) for u, d in sorted(gone.items())]
    return out


async def _hash_all(scanner: Scanner, uris: Sequence[str], out: Plan) -> dict[str, str]:
    """sha256 of each file, :data:`APPLY_CONCURRENCY` at a time; a file that vanished
    or cannot be read since the listing is skipped with its line."""
    found: dict[str, str] = {}

    async def one(uri: str) -> None:
        try:
            found[uri] = await scanner.sha256(uri)
        except InvalidDocument as exc:
            out.skipped.append(exc.message)

    await each(uris, one)
    out.hashed += len(found)
    return found


async def _match_moves(
    scanner: Scanner,
    entries: dict[str, Entry],
    gone: dict[str, sources.Known],
    fresh: list[str],
    out: Plan,
) -> None:
    """A new file with the bytes of a vanished document is that document, moved. Only
    new files as large as some vanished document are hashed to find out."""
    sizes = {d.byte_size for d in gone.values()}
    by_sha = {d.sha256: uri for uri, d in gone.items()}
    hashes = await _hash_all(scanner, [u for u in fresh if entries[u].size in sizes], out)
    for uri in fresh:
        sha = hashes.get(uri)
        was = by_sha.pop(sha, None) if sha else None
        if was is None:
            out.new.append(Change(uri=uri, sha256=sha))
            continue
        doc = gone.pop(was)
        out.moved.append(Change(uri=uri, document_id=doc.id, was=was, sha256=sha))


async def apply(
    pool: Pool,
    services: Services,
    scanner: Scanner,
    source: sources.Source,
    todo: Plan,
    on_step: Callable[[], None] = lambda: None,
) -> Outcome:
    """Carry out ``todo``: moves and touches first (one UPDATE each), then deletions,
    then new versions and new documents (bytes stored first, then one transaction)."""
    out = Outcome()
    entries = todo.entries
    for c in todo.moved:
        assert c.document_id is not None
        e = entries[c.uri]
        stamp = (e.mtime_ns, e.etag)
        await sources.move(pool, source, c.document_id, c.uri, escape_name(c.uri), stamp)
        on_step()
    for c in todo.touched:
        assert c.document_id is not None
        await sources.touch(pool, c.document_id, entries[c.uri].mtime_ns, entries[c.uri].etag)

    async def delete(c: Change) -> None:
        assert c.document_id is not None
        await delete_document(pool, services, c.document_id, source)
        on_step()

    async def store(c: Change) -> None:
        try:
            doc_id = await _store(pool, services, scanner, source, c, entries)
        except RaglineError as exc:
            out.refused.append(exc.message)
        else:
            if doc_id is not None:
                out.submitted.append(doc_id)
        on_step()

    await each(todo.deleted, delete)
    await each([*todo.changed, *todo.new], store)
    await sources.mark_synced(pool, source.id)
    return out


async def each(items: Sequence[T], fn: Callable[[T], Awaitable[None]]) -> None:
    """``fn`` of every item, :data:`APPLY_CONCURRENCY` at a time: files are independent,
    and their writes (a stored file, a commit) wait on the disk, not the CPU."""
    pending = iter(items)

    async def lane() -> None:
        for item in pending:
            await fn(item)

    async with anyio.create_task_group() as tg:
        for _ in range(min(APPLY_CONCURRENCY, len(items))):
            tg.start_soon(lane)


async def _store(
    pool: Pool,
    services: Services,
    scanner: Scanner,
    source: sources.Source,
    change: Change,
    entries: dict[str, Entry],
) -> uuid.UUID | None:
    """Store the file's bytes (hashed while stored), then record the new document or
    the new version. The recorded hash is that of the stored bytes."""
    from stages.ports.assets import original_key

    doc_id = change.document_id or uuid.uuid4()
    fmt, blocks = await _typed(scanner, change.uri)
    stored = await services.assets.put_stream(
        blocks, fmt.media_type, lambda sha: original_key(doc_id, sha)
    )
    doc = sources.NewSourceDocument(
        id=doc_id,
        filename=escape_name(change.uri),
        media_type=fmt.media_type,
        byte_size=stored.size,
        sha256=stored.sha256,
        asset_key=stored.key,
        uri=change.uri,
        mtime_ns=entries[change.uri].mtime_ns,
        etag=entries[change.uri].etag,
    )
    if change.document_id is not None:
        await sources.new_version(pool, doc, FIRST_STAGE)
    elif not await sources.insert_document(pool, source, doc, FIRST_STAGE):
        await services.assets.delete(stored.key)  # a concurrent sync's document won
        return None
    return doc_id


async def _typed(scanner: Scanner, uri: str) -> tuple[Format, AsyncIterator[bytes]]:
    """The file's format, detected from its first bytes as submit detects it (a folder's
    zip container listed from the file itself), and all its bytes.

    :raises InvalidDocument: empty, or not a type ragline reads (one line naming it).
    """
    blocks = scanner.chunks(uri)
    head: list[bytes] = []
    size = 0
    try:
        async for block in blocks:
            head.append(block)
            size += len(block)
            if size >= HEAD_BYTES:
                break
        first = b"".join(head)
        path = scanner.path_of(uri)
        name = escape_name(uri)
        fmt = await anyio.to_thread.run_sync(detect_bytes, first[:HEAD_BYTES], name, path)
    except BaseException:
        await blocks.aclose()  # a bucket's response goes back to the pool now
        raise

    async def everything() -> AsyncIterator[bytes]:
        try:
            if first:
                yield first
            async for block in blocks:
                yield block
        finally:
            await blocks.aclose()

    return fmt, everything()
