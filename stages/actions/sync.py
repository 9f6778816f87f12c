"""``ragline sync``: compare a source with what is indexed, then act.

A new file is stored and submitted (typed as submit types it); changed bytes are a new
generation of the same document; the same bytes at another URI a move (no stage runs); a
gone file's points and objects are removed (a tombstone stays); an unchanged size and
mtime cost only a stat. Applying holds the source's lock and makes every step one
transaction or an idempotent delete, so a sync killed midway and run again converges.

Deletes need evidence: on a listing that looks like a vanished mount (nothing under the
root, no file to sync left, or the folder on another device than at the last sync), a
sync deletes neither every document of its source nor more than a share of them unless
told to (:func:`deletes_refusal`). One file is one document
per collection: a new file whose bytes a document of no source holds (submitted,
uploaded) adopts it; one whose bytes another source's document (or this source's, at
another path) holds is skipped with one line. Each case, and the guarantees: README,
"Sync".
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, TypeVar

import anyio
import msgspec

from runtime.api import InvalidDocument, Pool, RaglineError, escape_name, one_line
from stages.actions.documents import delete_document
from stages.actions.submit import FIRST_STAGE
from stages.db import sources
from stages.parsing.formats.detect import HEAD_BYTES, Format, detect_bytes
from stages.ports.sources import Entry, Listing, Scanner, SourceUnreachable

# The services (and the asset store's minio) are imported only when there is work: an
# unchanged source costs a listing and one query, not seconds of imports.
if TYPE_CHECKING:
    from stages.ports.services import Services

T = TypeVar("T")
#: Files hashed, or stored and recorded, at once (the pool has 10 connections).
APPLY_CONCURRENCY = 8
#: The share of a source's documents one sync may delete, on a listing that looks like a
#: vanished mount, without ``--allow-deletes`` (RAGLINE_SYNC_DELETE_SHARE); every one of
#: them, never.
DEFAULT_DELETE_SHARE = 0.5


class DeletesRefused(RaglineError):
    """sync refused to delete documents on a listing that looks like a vanished mount."""


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
    #: New files whose bytes a document of no source holds: it becomes theirs.
    adopted: list[Change] = msgspec.field(default_factory=list)
    #: Files changed into the bytes of another document (a copy of another file now):
    #: their own document goes; the file is adopted or skipped as a new one would be.
    merged: list[Change] = msgspec.field(default_factory=list)
    unchanged: int = 0
    #: Files hashed to make the plan.
    hashed: int = 0
    skipped: list[str] = msgspec.field(default_factory=list)
    #: New files whose bytes are already a source's document (another source's, or this
    #: one's at another path), one line each: skipped, the file being indexed already.
    duplicates: list[str] = msgspec.field(default_factory=list)
    #: The listing the plan was made from.
    entries: dict[str, Entry] = msgspec.field(default_factory=dict)
    #: The source's documents before this sync.
    known: int = 0
    #: Why the listing looks like a vanished mount (None: it does not).
    evidence: str | None = None
    #: The folder's device, recorded once the plan is applied.
    device: int | None = None

    @property
    def empty(self) -> bool:
        """Nothing to apply: every file unchanged."""
        return not (
            self.new
            or self.changed
            or self.moved
            or self.deleted
            or self.touched
            or self.adopted
            or self.merged
        )

    def counts(self) -> dict[str, int]:
        return {
            "new": len(self.new),
            "changed": len(self.changed),
            "moved": len(self.moved),
            "deleted": len(self.deleted),
            "adopted": len(self.adopted),
            "unchanged": self.unchanged + len(self.touched),
        }


class Outcome(msgspec.Struct, kw_only=True):
    """What applying a plan did: the documents whose stages now run, and refusals."""

    submitted: list[uuid.UUID] = msgspec.field(default_factory=list)
    refused: list[str] = msgspec.field(default_factory=list)
    #: Files skipped while applying because their bytes became a document meanwhile.
    duplicates: list[str] = msgspec.field(default_factory=list)


async def plan(
    pool: Pool, scanner: Scanner, source: sources.Source | None, collection: str
) -> Plan:
    """Compare the source's files with its documents; hashes only what a stat cannot
    settle (size or mtime moved; a new file as large as a vanished document, or as one
    of the collection's)."""
    listing = await scanner.list()
    every = await sources.documents(pool, source.id) if source is not None else {}
    known = _readable(every, listing.unread)
    out = Plan(
        skipped=list(listing.skipped),
        entries=listing.entries,
        known=len(every),
        evidence=vanished(listing, source),
        device=listing.device,
    )
    await _compare(scanner, listing.entries, known, out)
    gone = {uri: doc for uri, doc in known.items() if uri not in listing.entries}
    fresh = sorted(uri for uri in listing.entries if uri not in known)
    await _match_moves(scanner, listing.entries, gone, fresh, out)
    not_owners = {d.id for d in gone.values()} | {c.document_id for c in out.changed}
    await _match_owners(pool, scanner, collection, not_owners, out)
    out.deleted = [Change(uri=u, document_id=d.id) for u, d in sorted(gone.items())]
    return out


def _readable(known: dict[str, sources.Known], unread: list[str]) -> dict[str, sources.Known]:
    """The documents outside the folders that could not be read: those inside are left
    as they are (their files were not seen, which is no evidence they are gone)."""
    if not unread:
        return known
    inside = tuple(f"{folder}/" for folder in unread)
    return {uri: doc for uri, doc in known.items() if not uri.startswith(inside)}


async def _compare(
    scanner: Scanner, entries: dict[str, Entry], known: dict[str, sources.Known], out: Plan
) -> None:
    """Known files: unchanged by their stat, else hashed: touched or changed."""
    moved_stat = []
    for uri, entry in sorted(entries.items()):
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


def vanished(listing: Listing, source: sources.Source | None) -> str | None:
    """Why ``listing`` looks like a mount that went away rather than deleted files."""
    if listing.empty:
        return (
            "the listing is empty, nothing at all under it (a disk not mounted? a bucket emptied?)"
        )
    last = source.device if source is not None else None
    if last is not None and listing.device is not None and listing.device != last:
        return (
            "the folder is on another device than at the last sync "
            "(a disk unmounted, or mounted elsewhere?)"
        )
    if not listing.entries:
        return "no file to sync is left under it, only other names (a disk not mounted?)"
    return None


def deletes_refusal(todo: Plan, uri: str, share: float = DEFAULT_DELETE_SHARE) -> str | None:
    """The one line refusing ``todo``'s deletions, or None when they may go: on a listing
    that looks like a vanished mount, every document of the source, or more than ``share``
    of them."""
    n, known = len(todo.deleted), todo.known
    if n == 0 or todo.evidence is None or (n < known and n <= known * share):
        return None
    why = todo.evidence
    if n < known:
        why += f"; more than {share:.0%} of its documents (RAGLINE_SYNC_DELETE_SHARE)"
    return one_line(
        f"sync: refusing to delete {n} of {known} document(s) of {escape_name(uri)}: "
        f"{why}; nothing was changed. If the files are really gone, run it again "
        "with --allow-deletes"
    )


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


async def _match_owners(
    pool: Pool, scanner: Scanner, collection: str, not_owners: set[uuid.UUID | None], out: Plan
) -> None:
    """New and changed files whose bytes are a document of the collection already (one
    document per content): adopted when it has no source, else skipped with one line; a
    changed file's own document then goes (:attr:`Plan.merged`). Only new files as large
    as one of the collection's documents are hashed to find out. ``not_owners``: the
    documents this plan deletes or changes (their recorded bytes are going). A changed
    file's hash is known: its owner is found by its bytes, not its size."""
    if not (out.new or out.changed):
        return
    sizes = sorted({out.entries[c.uri].size for c in out.new})
    found = await sources.same_size(pool, collection, sizes) if sizes else []
    if shas := sorted({c.sha256 for c in out.changed if c.sha256}):
        found += await sources.same_bytes(pool, collection, shas)
    found = [d for d in found if d.id not in not_owners]
    owners: dict[str, sources.SameSize] = {}
    for doc in found:
        owners.setdefault(doc.sha256, doc)  # unforced and oldest first: submit's pick
    held = {d.byte_size for d in found}
    unknown = [c.uri for c in out.new if c.sha256 is None and out.entries[c.uri].size in held]
    hashes = await _hash_all(scanner, unknown, out)
    changed, out.changed = out.changed, []
    for c in changed:
        if c.sha256 is None or c.sha256 not in owners:
            out.changed.append(c)
            continue
        out.merged.append(c)  # the file is a copy now: its own document goes
        owner = owners[c.sha256]
        out.duplicates.append(_merged(c, owner, scanner.uri))
        _claim(c.uri, owners, owner, scanner.uri, out, quiet=True)
    new, out.new = out.new, []
    for c in new:
        sha = c.sha256 or hashes.get(c.uri)
        if sha is None or sha not in owners:
            out.new.append(Change(uri=c.uri, sha256=sha))
        else:
            _claim(c.uri, owners, owners[sha], scanner.uri, out)


def _claim(
    uri: str,
    owners: dict[str, sources.SameSize],
    owner: sources.SameSize,
    source: str,
    out: Plan,
    quiet: bool = False,
) -> None:
    """The file ``uri`` whose bytes are ``owner``'s: adopted when it has no source (and
    from now on this source's, so a second copy is a copy of this file), else skipped
    with one line (unless ``quiet``: the caller said it)."""
    if owner.source_id is not None:
        if not quiet:
            out.duplicates.append(_duplicate(uri, owner, source))
        return
    out.adopted.append(Change(uri=uri, document_id=owner.id, sha256=owner.sha256))
    # Now this source's (whose id a dry run may not have).
    owners[owner.sha256] = msgspec.structs.replace(owner, source_id=-1, source=source, uri=uri)


def _merged(change: Change, owner: sources.SameSize, source_uri: str) -> str:
    """The line for a file changed into the bytes of another document: its own goes."""
    if owner.source_id is None:
        where = "a submitted one, which this file adopts"
    elif owner.source == source_uri:
        where = f"the one of {escape_name(owner.uri or '')} here"
    else:
        where = f"of source {escape_name(owner.source or '')} ({escape_name(owner.uri or '')})"
    return one_line(
        f"{escape_name(change.uri)}: its new bytes are already document {owner.id}, {where}: "
        f"its own document {change.document_id} goes (one document per collection)"
    )


def _duplicate(uri: str, owner: sources.SameSize, source_uri: str) -> str:
    shown = escape_name(uri)
    if owner.source == source_uri:  # this source's, at another path
        return f"{shown}: a copy of {escape_name(owner.uri or '')} (the same bytes: one document)"
    return one_line(
        f"{shown}: the same bytes are document {owner.id} of source "
        f"{escape_name(owner.source or '')} ({escape_name(owner.uri or '')}): "
        "one document per collection"
    )


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
    """Carry out ``todo``: the documents of files that became copies go first (their URI
    may be adopted), then moves, touches and adoptions (one UPDATE each), deletions, and
    new versions and new documents (bytes stored first, then one transaction). Deletions
    are not guarded here: the caller asks :func:`deletes_refusal`."""
    out = Outcome()
    entries = todo.entries

    async def delete(c: Change) -> None:
        assert c.document_id is not None
        await delete_document(pool, services, c.document_id, source)
        on_step()

    await each(todo.merged, delete)
    for c in todo.moved:
        assert c.document_id is not None
        e = entries[c.uri]
        stamp = (e.mtime_ns, e.etag)
        await sources.move(pool, source, c.document_id, c.uri, escape_name(c.uri), stamp)
        on_step()
    for c in todo.touched:
        assert c.document_id is not None
        await sources.touch(pool, c.document_id, entries[c.uri].mtime_ns, entries[c.uri].etag)
    await _adopt(pool, source, todo, out, on_step)

    async def store(c: Change) -> None:
        try:
            doc_id = await _store(pool, services, scanner, source, c, entries)
        except SourceUnreachable:
            raise  # every other file would fail the same way: one line, not one a file
        except RaglineError as exc:
            out.refused.append(exc.message)
        else:
            if doc_id is not None:
                out.submitted.append(doc_id)
            elif c.document_id is None:
                out.duplicates.append(
                    f"{escape_name(c.uri)}: its bytes became a document of the collection "
                    "meanwhile (a copy of another file, or another door)"
                )
        on_step()

    await each(todo.deleted, delete)
    await each([*todo.changed, *todo.new], store)
    await sources.mark_synced(pool, source.id, todo.device)
    return out


async def _adopt(
    pool: Pool, source: sources.Source, todo: Plan, out: Outcome, on_step: Callable[[], None]
) -> None:
    """Each adopted document becomes its file's (no stage runs again; one still running
    goes on, and the sync waits for it as for any of the source's unfinished documents)."""
    for c in todo.adopted:
        assert c.document_id is not None
        e = todo.entries[c.uri]
        stamp = (e.mtime_ns, e.etag)
        if not await sources.adopt(pool, source, c.document_id, c.uri, escape_name(c.uri), stamp):
            out.duplicates.append(
                f"{escape_name(c.uri)}: its document was taken by another source meanwhile"
            )
        on_step()


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
    # Closed by this task, whatever stops the store (Ctrl-C): left open, the event loop
    # would close the file's generators at exit, side by side, and log their errors.
    async with aclosing(blocks):
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
        # A concurrent sync's document won, or the same bytes are in the collection now.
        await services.assets.delete(stored.key)
        return None
    return doc_id


async def _typed(scanner: Scanner, uri: str) -> tuple[Format, AsyncGenerator[bytes, None]]:
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

    async def everything() -> AsyncGenerator[bytes, None]:
        try:
            if first:
                yield first
            async for block in blocks:
                yield block
        finally:
            await blocks.aclose()

    return fmt, everything()
