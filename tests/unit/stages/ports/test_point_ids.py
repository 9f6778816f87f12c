"""stages.ports.vector_index.point_ids: the batch path gives each chunk the uuid5 id that
point_id gives it alone."""

from __future__ import annotations

import uuid

from stages.ports.vector_index import point_id, point_ids


def test_point_ids_are_uuid5_ids() -> None:
    for doc in (uuid.UUID(int=0), uuid.uuid4(), uuid.uuid4()):
        ordinals = [0, 1, 9, 10, 255, 256, 12345, 10**9]
        assert point_ids(doc, ordinals) == [point_id(doc, n) for n in ordinals]
        assert all(i.version == 5 for i in point_ids(doc, ordinals))
