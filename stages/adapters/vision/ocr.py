"""RapidOCR (PP-OCR models shipped inside the ``rapidocr`` wheel, on onnxruntime) in a
worker thread as a :class:`stages.ports.vision.VisionModel`: no network, recognised text
only, in reading order."""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec
import numpy as np

from runtime.api import inference_limiter, inference_slots, usable_cores
from stages.adapters.vision.images import decode_rgb

if TYPE_CHECKING:
    from rapidocr import RapidOCR


#: The recogniser's runs over more than this many pixels (2 lines of 48 x 500) hand their
#: arena back; narrower ones, most of them, keep it: shrinking after every run doubled
#: OCR's system CPU (page faults), never shrinking held ~60 MB more at peak.
REC_SHRINK_ABOVE = 48_000


class LocalOCRConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of :class:`LocalOCR`."""

    #: Images are downscaled to this many pixels before OCR (bounded memory and time).
    max_pixels: int = 4_000_000
    #: The detector resizes the longer side to this; rapidocr's default (shorter side to
    #: 736) blows a wide 1200x400 image up to 2208x736 and runs ~7x slower.
    det_max_side: int = 960
    #: Detector inputs over this many pixels run in overlapping bands of at most this many
    #: (:func:`detection_bands`), their text maps stitched back into one, so that a pass
    #: holds what a 736 x 736 input needs rather than a 960 x 960 one (~100 MB against
    #: ~175 at peak), for the same boxes. 0: never. A smaller ``det_max_side`` instead
    #: lost 6.8% of the corpus's words (docs/performance.md).
    det_band_pixels: int = 736 * 736
    #: Rows (or columns) of context each band reads beyond the part of the map it keeps.
    det_band_margin: int = 64
    #: Text lines recognised per run. RapidOCR's 6 pads each line to the widest of its
    #: batch: on the corpus's images 2 took 9% less CPU and a fifth less peak memory, for
    #: the same words.
    rec_batch: int = 2
    #: Recognised lines scoring below this are dropped.
    min_score: float = 0.5
    #: RapidOCR's 0/180 degree line classifier. Off: on upright rendered pages it flipped
    #: 2-3 of 30 lines into garbage, and document images are nearly always upright.
    detect_upside_down: bool = False
    #: onnxruntime intra-op threads per call. One: the process runs up to one model call
    #: per core at once (:func:`runtime.api.inference_limiter`), each on its own engine,
    #: which keeps every core busy without oversubscribing them (docs/performance.md).
    threads: int = 1


class LocalOCR:
    """:class:`VisionModel` running RapidOCR offline; returns the text in reading order.

    Calls run in threads under the process's inference slots, each on an engine of its
    own (RapidOCR mutates its config on every call): at most one engine per slot, and only
    as many as calls ran at once. The engines share one loaded detector and recogniser,
    and detection passes share a :class:`PixelBudget` (one large picture at a time)."""

    def __init__(self, config: LocalOCRConfig | None = None) -> None:
        self.config = config or LocalOCRConfig()
        self._idle: list[RapidOCR] = []
        self._lock = threading.Lock()
        self._models: tuple[Any, Any] | None = None
        #: What detection passes hold while they run: one at the detector's largest input
        #: (or band) at a time, or several smaller ones (see :class:`PixelBudget`).
        self.detection_budget = PixelBudget(
            self.config.det_band_pixels or self.config.det_max_side**2
        )

    metered = False
    describes = True

    @property
    def name(self) -> str:
        return "local/rapidocr"

    @property
    def parallel(self) -> int:
        return inference_slots()

    async def describe(self, image: bytes, media_type: str) -> str:
        return await anyio.to_thread.run_sync(
            self.describe_sync, image, limiter=inference_limiter()
        )

    def describe_sync(self, image: bytes) -> str:
        """Blocking form of :meth:`describe` (thread-safe)."""
        rgb = decode_rgb(image, max_pixels=self.config.max_pixels)
        if min(rgb.size) < 8:
            return ""  # a sliver: nothing legible, and the detector rejects tiny inputs
        with self._engine() as engine:
            result = engine(rgb)
        boxes, txts = getattr(result, "boxes", None), getattr(result, "txts", None)
        if boxes is None or not txts:
            return ""
        return reading_order(np.asarray(boxes, dtype=np.float32), [str(t) for t in txts])

    @contextlib.contextmanager
    def _engine(self) -> Iterator[RapidOCR]:
        """An idle engine (loaded when none is), handed back after the call."""
        with self._lock:
            engine = self._idle.pop() if self._idle else None
        if engine is None:
            engine = self._load_engine()
        try:
            yield engine
        finally:
            with self._lock:
                self._idle.append(engine)

    def _load_engine(self) -> RapidOCR:
        from rapidocr import RapidOCR

        threads = self.config.threads or usable_cores()
        params = {
            # "The text detection result is empty" is a warning: a picture without text is
            # normal here, not worth a line per image.
            "Global.log_level": "error",
            "Global.text_score": self.config.min_score,
            "Global.use_cls": self.config.detect_upside_down,
            "Det.limit_type": "max",
            "Det.limit_side_len": self.config.det_max_side,
            "Rec.rec_batch_num": self.config.rec_batch,
            "EngineConfig.onnxruntime.intra_op_num_threads": threads,
            "EngineConfig.onnxruntime.inter_op_num_threads": 1,
            # onnxruntime's arena, grown by what each tensor asks (rapidocr's cpu_ep_cfg:
            # kSameAsRequested) and shrunk after every run (_Shared): a detection pass
            # peaks lower on it than on malloc, and hands its memory back.
            "EngineConfig.onnxruntime.enable_cpu_mem_arena": True,
        }
        engine = RapidOCR(params=params)
        self._share_models(engine)
        # RapidOCR installs its own coloured stderr handler; route its records through
        # ours instead, so --log-format json stays one JSON object per line.
        ocr_log = logging.getLogger("RapidOCR")
        ocr_log.handlers.clear()
        ocr_log.propagate = True
        return engine

    def _share_models(self, engine: RapidOCR) -> None:
        """Give ``engine`` this OCR's one detector and one recogniser: the first engine's
        models, loaded once, their sessions wrapped by :class:`_Shared` (a detection pass
        at a time). RapidOCR keeps per-call state on its TextDetector, so each engine gets
        a copy of it around the shared session."""
        with self._lock:
            if self._models is None:
                det = engine._load_det_model()  # type: ignore[no-untyped-call]
                rec = engine._load_rec_model()  # type: ignore[no-untyped-call]
                det.session = _Shared(
                    det.session,
                    self.detection_budget,
                    shrink_above=0,
                    band_pixels=self.config.det_band_pixels,
                    band_margin=self.config.det_band_margin,
                )
                rec.session = _Shared(rec.session, None, shrink_above=REC_SHRINK_ABOVE)
                self._models = (det, rec)
            det, rec = self._models
        engine.text_det, engine.text_rec = copy.copy(det), copy.copy(rec)

    async def aclose(self) -> None:
        with self._lock:
            self._idle.clear()
            self._models = None


def reading_order(boxes: np.ndarray[Any, Any], texts: Sequence[str]) -> str:
    """Join OCR boxes into lines (top to bottom) of words (left to right).

    ``boxes`` is ``(n, 4, 2)`` corner points. A box joins the current line when its
    vertical centre falls inside that line's first box.
    """
    spans = [(float(b[:, 1].min()), float(b[:, 1].max()), float(b[:, 0].min())) for b in boxes]
    order = sorted(range(len(texts)), key=lambda i: (spans[i][0], spans[i][2]))
    lines: list[list[int]] = []
    for i in order:
        centre = (spans[i][0] + spans[i][1]) / 2
        if lines and spans[lines[-1][0]][0] <= centre <= spans[lines[-1][0]][1]:
            lines[-1].append(i)
        else:
            lines.append([i])
    return "\n".join(
        " ".join(texts[i] for i in sorted(ln, key=lambda i: spans[i][2])) for ln in lines
    )


class PixelBudget:
    """Detection passes in flight, by their input's pixels: a pass waits while others
    hold more than ``pixels`` with it, unless none runs (a larger input runs alone).

    A detection pass's memory grows with its input (~175 MB at 960 x 960, ~100 at one
    band of 736 x 736 pixels): two passes over large pictures at once held twice that,
    and made ingest's peak. Small pictures, most of a manual's, still run side by side."""

    def __init__(self, pixels: int) -> None:
        self.pixels = pixels
        self.held = 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def hold(self, pixels: int) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: self.held == 0 or self.held + pixels <= self.pixels)
            self.held += pixels
        try:
            yield
        finally:
            with self._changed:
                self.held -= pixels
                self._changed.notify_all()


#: The detector's input sides are multiples of this (rapidocr rounds them to it).
DET_STRIDE = 32


def detection_bands(length: int, across: int, max_pixels: int, margin: int) -> list[Band]:
    """How a detector input ``length`` long (the axis it is cut along) and ``across``
    wide runs in bands of at most ``max_pixels`` (``length`` x ``across`` over it): the
    fewest bands, cut into equal parts on multiples of :data:`DET_STRIDE`, each reading
    ``margin`` more on its inner sides. One band (the whole input) when it fits, or when
    no cut would (a margin wider than the band)."""
    whole = [Band(0, length, 0, length)]
    if max_pixels <= 0 or length * across <= max_pixels:
        return whole
    steps = -(-length // DET_STRIDE)
    for n in range(2, steps + 1):
        core = -(-steps // n) * DET_STRIDE
        cuts = [min(i * core, length) for i in range(n + 1)]
        bands = [
            Band(max(0, a - margin), min(length, b + margin), a, b)
            for a, b in itertools.pairwise(cuts)
            if b > a
        ]
        if max(b.end - b.start for b in bands) * across <= max_pixels:
            return bands
        if core <= 2 * margin:
            break
    return whole


class Band(msgspec.Struct, frozen=True):
    """Part of a detector input: it reads ``start:end`` and keeps ``keep_start:keep_end``."""

    start: int
    end: int
    keep_start: int
    keep_end: int


class _Shared:
    """A RapidOCR model's onnxruntime session as its engines call it (``session(batch)``),
    shared by every engine of a :class:`LocalOCR`; the detector's runs hold their input's
    pixels of the :class:`PixelBudget`, the recogniser's (a few MB a batch) none.

    Detector inputs over ``band_pixels`` run in bands (:func:`detection_bands`) along
    their longer side: the detector's output is a text-probability map the size of its
    input, so each band's map, less its margins, is copied into the whole one, and
    rapidocr finds its boxes on that as on one pass's. A pass's memory grows with its
    input's pixels; the bands' margins cost their pixels' CPU (~13% at 960 x 960).

    A run over more than ``shrink_above`` pixels hands the arena's unused memory back
    (``memory.enable_memory_arena_shrinkage``), so what a large input needed is not held
    until the next; smaller runs keep it, and reuse it without faulting it in afresh
    (docs/performance.md).
    """

    def __init__(
        self,
        inner: Any,
        budget: PixelBudget | None,
        shrink_above: int,
        band_pixels: int = 0,
        band_margin: int = 0,
    ) -> None:
        import onnxruntime

        self.inner = inner
        self.budget = budget
        self.shrink_above = shrink_above
        self.band_pixels = band_pixels
        self.band_margin = band_margin
        self._input = inner.get_input_names()[0]
        self._outputs = inner.get_output_names()
        self._keep = onnxruntime.RunOptions()
        self._shrink = onnxruntime.RunOptions()
        self._shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def __call__(self, batch: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        height, width = batch.shape[-2:]
        axis = -2 if height >= width else -1
        length, across = (height, width) if axis == -2 else (width, height)
        bands = detection_bands(length, across, self.band_pixels, self.band_margin)
        if len(bands) == 1:
            return self._run(batch)
        out: np.ndarray[Any, Any] | None = None
        for band in bands:
            part = self._run(np.ascontiguousarray(_cut(batch, axis, band.start, band.end)))
            if out is None:
                shape = list(part.shape)
                shape[axis] = length
                out = np.empty(shape, dtype=part.dtype)
            begin = band.keep_start - band.start
            kept = _cut(part, axis, begin, begin + band.keep_end - band.keep_start)
            _cut(out, axis, band.keep_start, band.keep_end)[...] = kept
        assert out is not None
        return out

    def _run(self, batch: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        pixels = batch.shape[-2] * batch.shape[-1]
        options = self._shrink if pixels * batch.shape[0] > self.shrink_above else self._keep
        with self.budget.hold(pixels) if self.budget else contextlib.nullcontext():
            out = self.inner.session.run(self._outputs, {self._input: batch}, options)
        return out[0]  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # have_key, get_character_list, ...


def _cut(array: np.ndarray[Any, Any], axis: int, start: int, end: int) -> np.ndarray[Any, Any]:
    """``array[..., start:end, :]`` (``axis`` -2) or ``array[..., start:end]`` (-1): a view."""
    return array[..., start:end, :] if axis == -2 else array[..., start:end]
