"""The exporter process's loop, without the process: frames split however the pipe's reads
cut them, frames read along with the hello kept, spans that arrive together sent in whole
batches (never more than the batch size a request), and a flush answered only after
everything before it was sent."""

from __future__ import annotations

import io
import os
import queue
from typing import Any

import msgspec

from runtime.process.span_exporter import Exporting, Frames, Item
from runtime.process.span_shipper import FLUSH, HELLO, SEQ, SPANS, frame
from tests.support.wire_spans import RESOURCE, span

_encode = msgspec.msgpack.Encoder().encode


def spans_frame(first: int, count: int) -> bytes:
    """A frame of ``count`` spans whose span ids start at ``first``."""
    return frame(SPANS, _encode([span(span_id=first + i) for i in range(count)]))


def flush_frame(seq: int) -> bytes:
    return frame(FLUSH, SEQ.pack(seq))


def kinds(got: list[tuple[bytes, memoryview]]) -> list[tuple[bytes, bytes]]:
    return [(kind, bytes(payload)) for kind, payload in got]


def test_frames_cut_anywhere_by_the_reads_come_out_whole_and_in_order() -> None:
    data = spans_frame(1, 3) + flush_frame(7) + spans_frame(10, 1)
    whole = kinds(Frames().feed(data))
    assert [kind for kind, _ in whole] == [SPANS, FLUSH, SPANS]
    for step in (1, 2, 5, 64):
        frames, got = Frames(), []
        for at in range(0, len(data), step):
            got += kinds(frames.feed(data[at : at + step]))
        assert got == whole
        assert frames.rest == b""


def test_frames_read_with_the_hello_are_kept_for_the_loop() -> None:
    read, write = os.pipe()
    try:
        os.write(write, frame(HELLO, b"hi") + spans_frame(1, 2) + flush_frame(1)[:5])
        frames = Frames()
        assert kinds([frames.first(read)]) == [(HELLO, b"hi")]  # type: ignore[list-item]
        assert [kind for kind, _ in frames.feed(b"")] == [SPANS]
        assert [kind for kind, _ in frames.feed(flush_frame(1)[5:])] == [FLUSH]
        os.close(write)
        assert Frames().first(read) is None  # the input ended first
    finally:
        os.close(read)


class Sent:
    """A direct sender that keeps the span count of each request."""

    def __init__(self) -> None:
        self.requests: list[int] = []

    def export(self, body: bytes, spans: int) -> bool:
        self.requests.append(spans)
        return True


def exporting(batch: int) -> tuple[Exporting, Sent, io.BytesIO]:
    sent, answers = Sent(), io.BytesIO()
    loop = Exporting([], RESOURCE, answers, [sent])  # type: ignore[list-item]
    loop.batch = batch
    return loop, sent, answers


def run(loop: Exporting, *chunks: bytes) -> None:
    items: queue.SimpleQueue[Item] = queue.SimpleQueue()
    for chunk in (*chunks, None):
        items.put(chunk)
    loop.run(items, Frames())


def test_spans_that_arrive_together_go_in_whole_batches_the_rest_when_idle() -> None:
    loop, sent, _ = exporting(batch=4)
    # 3 + 3 + 5 spans read at once: two whole batches, then the 3 left once idle
    run(loop, spans_frame(1, 3) + spans_frame(4, 3) + spans_frame(7, 5))
    assert sent.requests == [4, 4, 3]


def test_a_flush_is_answered_after_everything_before_it_is_sent() -> None:
    loop, sent, answers = exporting(batch=512)
    seen: list[Any] = []
    real = sent.export

    def export(body: bytes, spans: int) -> bool:
        seen.append(("sent", spans, answers.getvalue()))
        return real(body, spans)

    sent.export = export  # type: ignore[method-assign]
    run(loop, spans_frame(1, 2) + flush_frame(9) + spans_frame(3, 1))
    assert seen == [("sent", 2, b""), ("sent", 1, SEQ.pack(9))]
    assert answers.getvalue() == SEQ.pack(9)
