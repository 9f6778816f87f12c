"""Search: embed a query with the live embedding model and ask the live vector collection."""

from __future__ import annotations

from runtime.api import MissingInput, Pool
from stages.db.model_switch import Live, live
from stages.ports.services import Services
from stages.ports.vector_index import Hit


async def search_live(
    pool: Pool, services: Services, query: str, limit: int, tenant: str | None
) -> tuple[Live, list[Hit]]:
    """Embed ``query`` with the live model and search the live collection (only the
    ``tenant`` collection's points when given). If the collection is deleted between
    reading the alias and searching it (a swap finished), the alias is read again: an
    answer always comes whole from the one collection that was live."""
    where = await live(pool, services)
    for _ in range(3):
        [vector] = await services.embedder_for(where.model).embed([query], "search_query")
        try:
            hits = await services.index.search(
                where.vector_collection, vector, limit, tenant=tenant
            )
            return where, hits
        except MissingInput:
            again = await live(pool, services)
            if again == where:  # nothing indexed yet with this model
                return where, []
            where = again
    return where, []
