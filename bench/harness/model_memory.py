"""Where the default path's memory goes: one fresh process per part, its resident size
read from ``/proc/self/status`` before and after (issue 38, item 4).

``python -m bench.harness.model_memory PART`` prints one JSON object; bench.default_path
runs every part and prints the table. Parts:

- ``imports``: the interpreter with what an ingest worker imports (the pipeline,
  onnxruntime, tokenizers, qdrant-edge, RapidOCR with OpenCV; not PyMuPDF, which only
  the parser process loads), nothing loaded (every part starts from there: ``base_mb``);
- ``embedder``: the local embedder's session as ingest loads it (its int8 weights
  multiplied as int8: ``stages.adapters.embedder.int8``), then runs of ``inner_batch``
  texts of 256 tokens (the longest a chunk is) on one thread, as ingest runs them;
- ``embedder-float``: the same model file as it stands (the model ships int8 weights
  with a Cast and a Mul each; onnxruntime's constant folding makes float32 copies at
  load), the same runs;
- ``embedder-unfolded``: the model file with constant folding off (int8 weights
  dequantized at every run);
- ``ocr``: a RapidOCR engine loaded, then one detection pass over a 200 x 200 page and
  one over a 960 x 960 page (the detector's largest input: ``LocalOCRConfig.
  det_max_side``); ``held``: what stays resident after them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARTS = ("imports", "embedder", "embedder-float", "embedder-unfolded", "ocr")


def _status_mb(key: str) -> float:
    text = Path("/proc/self/status").read_text()
    return int(text.split(f"{key}:")[1].split()[0]) / 1024


def _rss() -> float:
    return _status_mb("VmRSS")


def _hwm() -> float:
    return _status_mb("VmHWM")


def _embedder(fold: bool, int8: bool) -> dict[str, float]:
    import numpy as np
    import onnxruntime

    from stages.adapters.embedder.int8 import integer_matmuls
    from stages.adapters.embedder.local import LocalEmbedderConfig, _default_model_path

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = False
    before = _rss()
    path = _default_model_path()
    model: str | bytes = integer_matmuls(path) if int8 else path
    session = onnxruntime.InferenceSession(
        model,
        sess_options=options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=[] if fold else ["ConstantFolding"],
    )
    del model  # the serialized graph: ingest keeps only the session
    loaded = _rss()
    rng = np.random.default_rng(0)
    batch = LocalEmbedderConfig().inner_batch
    cpu = time.process_time()
    for _ in range(20):
        ids = rng.integers(1000, 20000, (batch, 256)).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        session.run(["last_hidden_state"], {**feeds, "token_type_ids": np.zeros_like(ids)})
    return {
        "load_mb": loaded - before,
        "runs_mb": _hwm() - loaded,
        "cpu_s": time.process_time() - cpu,
    }


def _ocr() -> dict[str, float]:
    from PIL import Image

    from stages.adapters.vision.ocr import LocalOCR

    ocr = LocalOCR()
    before = _rss()
    with ocr._engine() as engine:
        loaded = _rss()
        engine(Image.new("RGB", (200, 200), "white"))
        small = _hwm()
        engine(Image.new("RGB", (960, 960), "white"))
        return {
            "load_mb": loaded - before,
            "small_mb": small - loaded,
            "runs_mb": _hwm() - loaded,
            "held_mb": _rss() - loaded,
        }


def measure(part: str) -> dict[str, Any]:
    from runtime.process.heap import limit_malloc_arenas

    limit_malloc_arenas()  # the allocator's settings of a worker, set as it starts
    # What a worker running every stage has imported before it loads a model.
    import onnxruntime  # noqa: F401
    import qdrant_edge  # noqa: F401
    import tokenizers  # noqa: F401
    from rapidocr import RapidOCR  # noqa: F401  (OpenCV with it)

    import stages.app  # noqa: F401

    parts: dict[str, Callable[[], dict[str, float]]] = {
        "imports": lambda: {},
        "embedder": lambda: _embedder(fold=True, int8=True),
        "embedder-float": lambda: _embedder(fold=True, int8=False),
        "embedder-unfolded": lambda: _embedder(fold=False, int8=False),
        "ocr": _ocr,
    }
    base = _rss()
    return {"part": part, "base_mb": base, **parts[part]()}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PARTS:
        print(f"usage: python -m bench.harness.model_memory {{{','.join(PARTS)}}}")
        return 2
    print(json.dumps(measure(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
