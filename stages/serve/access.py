"""Security trimming at the doors: which documents, and which of their events, a caller
may see and act on (:class:`~stages.serve.auth.Caller` says who asks).

The rule is search's (``schema/queries/search.sql``): a document without readers is
everyone's; one with readers is a caller's when they include one of its principals; a
caller without principals reads everything. A document a caller may not read is, to it,
a document that does not exist: 404 like a missing one, never 403, and never counted,
named or hinted at in another answer.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Sequence

from runtime.api import DocumentEvent, Pool
from stages.db import search as search_db
from stages.serve.auth import Caller

#: Documents whose readability an event stream remembers (for their ``deleted`` events).
REMEMBERED = 10_000


async def hidden(pool: Pool, caller: Caller, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Those of ``ids`` that exist and that ``caller`` may not read (none for a caller
    who may read everything; ids of no document are not counted here)."""
    if not caller.restricted or not ids:
        return set()
    about = await search_db.about_documents(pool, ids)
    return {d for d, a in about.items() if not caller.may_read(a.readers)}


async def may_read(pool: Pool, caller: Caller, doc_id: uuid.UUID) -> bool:
    """Whether ``caller`` may read the document (True also when there is none: the
    caller's 404 is then the missing document's)."""
    return doc_id not in await hidden(pool, caller, [doc_id])


class EventTrim:
    """Which document events one stream may carry. An event is checked against its
    document's readers as they are when it is sent; a ``deleted`` event (its row, and so
    its readers, are gone) only when this stream found the document readable before."""

    def __init__(self, pool: Pool, caller: Caller) -> None:
        self.pool = pool
        self.caller = caller
        self._seen: OrderedDict[uuid.UUID, bool] = OrderedDict()

    async def allowed(self, events: Sequence[DocumentEvent]) -> list[DocumentEvent]:
        """The events of ``events`` the caller may see, in order (one query for all)."""
        if not self.caller.restricted:
            return list(events)
        live = [e.document_id for e in events if e.status != "deleted"]
        about = await search_db.about_documents(self.pool, live) if live else {}
        out = []
        for event in events:
            doc = event.document_id
            if event.status == "deleted":
                ok = self._seen.pop(doc, False)
            else:
                ok = doc in about and self.caller.may_read(about[doc].readers)
                self._remember(doc, ok)
            if ok:
                out.append(event)
        return out

    def _remember(self, doc: uuid.UUID, readable: bool) -> None:
        self._seen[doc] = readable
        self._seen.move_to_end(doc)
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
