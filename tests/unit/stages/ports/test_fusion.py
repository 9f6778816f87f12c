"""stages.ports.vector_index.fuse: score fusion, the same for every index."""

from __future__ import annotations

import uuid

from stages.ports.vector_index import (
    FUSION_WEIGHTS,
    Hit,
    Keywords,
    Query,
    fuse,
    side_depth,
)

A, B, C, D = (uuid.uuid4() for _ in range(4))


def hits(*scored: tuple[uuid.UUID, float]) -> list[Hit]:
    return [Hit(id=i, score=s, payload={"n": n}) for n, (i, s) in enumerate(scored, 1)]


def test_a_point_in_both_rankings_wins_when_no_side_is_sure() -> None:
    dense = hits((A, 0.9), (B, 0.8), (C, 0.7))
    keyword = hits((C, 10.0), (D, 9.5))  # 10 < 1.2 × 9.5: not sure
    fused = fuse(dense, keyword, Query(vector=[1.0]), 3)
    assert [h.id for h in fused] == [C, D, A]
    w_dense, w_keyword = FUSION_WEIGHTS
    assert abs(fused[0].score - (w_dense * 0.0 + w_keyword * 1.0)) < 1e-12  # dense's last: 0
    assert abs(fused[2].score - w_dense) < 1e-12  # dense's best, no keyword side
    assert fused[0].payload == {"n": 3}  # the dense ranking's copy


def test_a_sure_keyword_side_keeps_its_best_first() -> None:
    """An identifier's exact hit (BM25 far above the rest) is not outvoted by points the
    dense side ranks first."""
    dense = hits((A, 0.95), (B, 0.94), (D, 0.50))
    keyword = hits((D, 30.0), (A, 12.0), (B, 11.0))
    assert fuse(dense, keyword, Query(vector=[1.0]), 3)[0].id == D
    # Without the margin the weighted sum decides.
    close = hits((D, 13.0), (A, 12.0), (B, 11.0))
    assert fuse(dense, close, Query(vector=[1.0]), 3)[0].id == A
    # A keyword side of one hit is sure of it.
    assert fuse(dense, hits((B, 1.0)), Query(vector=[1.0]), 1)[0].id == B


def test_weights_tilt_the_fusion_and_the_limit_holds() -> None:
    dense = hits((A, 0.9), (B, 0.8), (C, 0.1))
    keyword = hits((C, 10.0), (B, 9.0))
    meaning = Query(vector=[1.0], weights=(0.9, 0.1))
    assert [h.id for h in fuse(dense, keyword, meaning, 2)] == [A, B]
    words = Query(vector=[1.0], weights=(0.1, 0.9))
    assert [h.id for h in fuse(dense, keyword, words, 2)] == [C, B]
    assert fuse([], [], words, 5) == []
    assert [h.id for h in fuse(dense, [], words, 5)] == [A, B, C]


def test_hybrid_asks_each_side_for_more_than_the_limit() -> None:
    words = Keywords(indices=[1], values=[1.0])
    assert Query(vector=[1.0]).mode == "dense" and side_depth(Query(vector=[1.0]), 5) == 5
    assert Query(keywords=words).mode == "keyword" and side_depth(Query(keywords=words), 5) == 5
    both = Query(vector=[1.0], keywords=words)
    assert both.mode == "hybrid" and side_depth(both, 5) >= 20 and side_depth(both, 100) == 400
