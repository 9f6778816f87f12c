"""Local OCR's detection in bands: inputs over the band budget are cut along their longer
side into overlapping bands whose maps, less their margins, make the whole map
(stages.adapters.vision.ocr.detection_bands, _Shared)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from stages.adapters.vision.ocr import DET_STRIDE, LocalOCRConfig, _Shared, detection_bands


def test_an_input_within_the_budget_is_one_band() -> None:
    assert [(b.start, b.end) for b in detection_bands(960, 544, 736 * 736, 64)] == [(0, 960)]
    assert len(detection_bands(960, 960, 0, 64)) == 1  # 0: never cut


def test_the_default_cuts_a_960_square_in_two() -> None:
    config = LocalOCRConfig()
    bands = detection_bands(960, 960, config.det_band_pixels, config.det_band_margin)
    assert [(b.start, b.end, b.keep_start, b.keep_end) for b in bands] == [
        (0, 544, 0, 480),
        (416, 960, 480, 960),
    ]


@pytest.mark.parametrize("length", [32 * k for k in range(1, 31)])
@pytest.mark.parametrize("across", [320, 640, 960])
@pytest.mark.parametrize(("max_pixels", "margin"), [(736 * 736, 64), (300_000, 32), (1, 64)])
def test_bands_keep_every_row_once_and_fit_where_they_can(
    length: int, across: int, max_pixels: int, margin: int
) -> None:
    bands = detection_bands(length, across, max_pixels, margin)
    kept = [row for b in bands for row in range(b.keep_start, b.keep_end)]
    assert kept == list(range(length))
    for b in bands:
        assert 0 <= b.start <= b.keep_start < b.keep_end <= b.end <= length
        assert b.start % DET_STRIDE == 0 and b.end % DET_STRIDE == 0
        if len(bands) > 1:
            assert (b.end - b.start) * across <= max_pixels
            assert b.keep_start - b.start == (margin if b.start else 0)
            assert b.end - b.keep_end == (margin if b.end < length else 0)


class _Session:
    """A detector stand-in whose map at a pixel depends on the pixel's neighbourhood only
    (a 3 x 3 box sum of its channels), and which records its inputs' shapes."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def run(self, outputs: Any, feeds: dict[str, np.ndarray[Any, Any]], options: Any) -> Any:
        (batch,) = feeds.values()
        self.shapes.append(batch.shape)
        summed = np.pad(batch.sum(axis=1, keepdims=True), ((0, 0), (0, 0), (1, 1), (1, 1)))
        h, w = batch.shape[-2:]
        return [sum(summed[..., i : i + h, j : j + w] for i in range(3) for j in range(3))]


class _Model:
    def __init__(self) -> None:
        self.session = _Session()

    def get_input_names(self) -> list[str]:
        return ["x"]

    def get_output_names(self) -> list[str]:
        return ["maps"]


@pytest.mark.parametrize("shape", [(960, 960), (640, 960), (960, 320), (544, 960)])
def test_banded_maps_match_the_whole_map(shape: tuple[int, int]) -> None:
    batch = np.random.default_rng(0).random((1, 3, *shape), dtype=np.float32)
    whole, banded = _Model(), _Model()
    expected = _Shared(whole, None, shrink_above=0)(batch)
    got = _Shared(banded, None, shrink_above=0, band_pixels=736 * 736, band_margin=64)(batch)
    np.testing.assert_array_equal(got, expected)
    pixels = [s[-2] * s[-1] for s in banded.session.shapes]
    assert len(pixels) == (1 if shape[0] * shape[1] <= 736 * 736 else 2)
    assert len(pixels) == 1 or max(pixels) <= 736 * 736
