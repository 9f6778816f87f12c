"""sync's delete guard: on a listing that looks like a vanished mount, never every
document of a source and no more than a share of them without ``--allow-deletes``; the
one line that refuses the rest."""

from __future__ import annotations

import uuid

import pytest

from stages.actions.sync import DEFAULT_DELETE_SHARE, Change, Plan, deletes_refusal, vanished
from stages.db import sources
from stages.ports.sources import Entry, Listing

EMPTY = "the listing is empty, nothing at all under it"


def plan_deleting(deleted: int, known: int, evidence: str | None) -> Plan:
    gone = [Change(uri=f"f{i}.pdf", document_id=uuid.uuid4()) for i in range(deleted)]
    return Plan(deleted=gone, known=known, evidence=evidence)


@pytest.mark.parametrize(
    ("deleted", "known", "refused"),
    [
        (6, 6, True),  # everything
        (1, 1, True),  # everything, however few
        (7, 8, True),  # more than half
        (2, 3, True),
        (6, 11, True),
        (6, 12, False),  # half
        (1, 2, False),
        (0, 6, False),
    ],
)
def test_a_vanished_mount_may_not_delete_most_documents(
    deleted: int, known: int, refused: bool
) -> None:
    line = deletes_refusal(plan_deleting(deleted, known, EMPTY), "/mnt/disk")
    assert (line is not None) == refused
    if line is not None:
        assert f"{deleted} of {known}" in line and "--allow-deletes" in line, line
        assert "/mnt/disk" in line and EMPTY in line and "\n" not in line


def test_the_share_is_a_setting() -> None:
    assert DEFAULT_DELETE_SHARE == 0.5
    assert deletes_refusal(plan_deleting(7, 8, EMPTY), "/d", share=0.9) is None
    line = deletes_refusal(plan_deleting(2, 8, EMPTY), "/d", share=0.2)
    assert line is not None and "more than 20%" in line and "RAGLINE_SYNC_DELETE_SHARE" in line
    assert deletes_refusal(plan_deleting(8, 8, EMPTY), "/d", share=1.0) is not None


def test_without_evidence_any_deletion_goes() -> None:
    assert deletes_refusal(plan_deleting(6, 6, None), "/d") is None


def listing(entries: int, empty: bool = False, device: int | None = 7) -> Listing:
    found = {f"f{i}.pdf": Entry(uri=f"f{i}.pdf", size=1, mtime_ns=1) for i in range(entries)}
    return Listing(entries=found, skipped=[], empty=empty, device=device)


def test_what_looks_like_a_vanished_mount() -> None:
    seen = sources.Source(id=1, uri="/mnt/disk", collection="default", device=7)
    assert vanished(listing(0, empty=True), seen) == vanished(listing(0, empty=True), None)
    assert "empty" in (vanished(listing(0, empty=True), seen) or "")
    assert "no file to sync" in (vanished(listing(0), seen) or "")  # only other names
    assert "another device" in (vanished(listing(3, device=8), seen) or "")
    assert vanished(listing(3), seen) is None
    assert vanished(listing(3, device=8), None) is None  # no device recorded yet
    assert vanished(listing(3, device=None), seen) is None  # a bucket
