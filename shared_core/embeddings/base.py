"""What an embedder is: the protocols, and the checks every embedder's input and output pass.

An embedder returns float32, L2-normalised rows (:func:`normalise_rows`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

from ..text.hygiene import invalid_character

if TYPE_CHECKING:  # the state package imports this module
    from ..state.rows import Rows

# Texts per embed() call when the core embeds a corpus: one constant, so the index and the
# baselines hand a model the same batches.
EMBED_BATCH = 512


@runtime_checkable
class Embedder(Protocol):
    """What the core needs from an embedding model."""

    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as a (len(texts), dim) float32 array of unit rows."""
        ...


@runtime_checkable
class QueryEmbedder(Embedder, Protocol):
    """An embedder whose model embeds queries differently from passages (e.g. E5, BGE)."""

    def embed_query(self, text: str) -> np.ndarray:
        """The query's vector, shape (dim,); normalised by the caller."""
        ...


def check_texts(texts: object, what: str = "texts", start: int = 0) -> list[str]:
    """Reject anything but a sequence of non-blank strings, naming the first offender.

    Every chunk and query passes here, so lone surrogates and NUL characters
    (``text.invalid_character``) are an error naming the text and the character
    offset: cleaning them would silently make the indexed text differ from the
    caller's. ``start`` is the position of ``texts[0]`` in a longer stream, so
    errors name the position the caller knows.
    """
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise TypeError(f"{what} must be a sequence of str, got {type(texts).__name__}")
    out = list(texts)
    for i, text in enumerate(out, start=start):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{i}] must be str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError(f"{what}[{i}] is empty or whitespace")
        bad = invalid_character(text)
        if bad is not None:
            offset, description = bad
            raise ValueError(f"{what}[{i}] contains {description} at character {offset}: "
                             "text must be valid Unicode without NUL characters")
    return out


def normalise_rows(vectors: object, n_rows: int, dim: int, source: str) -> np.ndarray:
    """Validate an embedder's output and return it as unit-norm float32 rows.

    A model that returns the wrong count, the wrong width, NaNs or zero vectors
    would silently poison every similarity downstream, so it is an error here.
    """
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n_rows:
        raise ValueError(f"{source} returned shape {arr.shape}, expected ({n_rows}, {dim})")
    if arr.shape[1] != dim:
        raise ValueError(f"{source} returned vectors of dimension {arr.shape[1]}, expected {dim}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{source} returned non-finite values (NaN or inf)")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    if n_rows and float(norms.min()) == 0.0:
        raise ValueError(f"{source} returned an all-zero vector")
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


def embed_query(embedder: Embedder, query: str) -> np.ndarray:
    """The unit query vector: the model's query embedding where it has one, else ``embed``."""
    rows = ([embedder.embed_query(query)] if isinstance(embedder, QueryEmbedder)
            else embedder.embed([query]))
    return normalise_rows(rows, 1, embedder.dim, embedder.model_id)[0]


def unit_norm_rows(sums: np.ndarray) -> np.ndarray:
    """``sums`` with every row scaled to length 1 (a zero row stays zero, never NaN)."""
    return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)


def finite_row_norms(vectors: np.ndarray) -> np.ndarray | None:
    """Each stored row's length, or None when a value is not finite (NaN or inf).

    Read ``VECTOR_BLOCK`` rows at a time, so a mapped file is never copied whole,
    and summed in float32: its error, ~dim x 6e-8, is far inside
    ``UNIT_NORM_TOLERANCE``, the slack a load's unit-length checks allow.
    """
    norms = np.empty(len(vectors), dtype=np.float32)
    for start in range(0, len(vectors), VECTOR_BLOCK):
        block = np.asarray(vectors[start:start + VECTOR_BLOCK], dtype=np.float32)
        if not np.isfinite(block).all():
            return None
        norms[start:start + len(block)] = np.sqrt(np.einsum("ij,ij->i", block, block))
    return norms


VECTOR_BLOCK = 65_536  # stored vector rows converted at a time by a product or a check
# how far a stored vector's length may be from 1 and still count as a unit vector
UNIT_NORM_TOLERANCE = 1e-3
# Fixed-point scale of :func:`fixed_point`: sums of vectors in it are exact integers.
FIXED_POINT_BITS = 32
# Rows converted to float64 at a time inside a block when the product accumulates in place
# (6 MB at 384 dimensions: it stays in cache, and no large array is ever allocated).
ROW_BLOCK = 2048

try:  # scipy's kernel for csc @ dense, which adds into its output: private, but the very
    # function ``csc_matrix @ ndarray`` calls, so results are the same bits either way
    from scipy.sparse._sparsetools import csc_matvecs as _csc_matvecs
except ImportError:  # pragma: no cover - a scipy without it takes the public path
    _csc_matvecs = None


def sparse_times_vectors(weights: sp.spmatrix, vectors: Rows) -> np.ndarray:
    """``weights @ vectors`` in float64, converting ``vectors`` a block of rows at a time.

    ``vectors`` may be float16 or memory-mapped: no float32 or float64 copy of the
    whole matrix is ever made. Each ``VECTOR_BLOCK`` rows' product is summed on its
    own, then added to the result, so the block boundaries are part of the result's
    rounding and stay fixed. Within a block, the kernel adds each row's terms in
    order into the block's sum, so converting ``ROW_BLOCK`` rows at a time and adding
    in place gives the same bits as the whole block at once.
    """
    columns = sp.csc_matrix(weights, dtype=np.float64)
    out = np.zeros((columns.shape[0], vectors.shape[1]), dtype=np.float64)
    part = np.empty_like(out) if len(vectors) > VECTOR_BLOCK else out
    for start in range(0, len(vectors), VECTOR_BLOCK):
        stop = min(start + VECTOR_BLOCK, len(vectors))
        if not start:  # the first block's sum is the running total (0 + x == x)
            _add_product(columns, vectors, start, stop, out)
            continue
        part[...] = 0.0
        _add_product(columns, vectors, start, stop, part)
        out += part
    return out


def fixed_point_product(weights: sp.spmatrix, vectors: Rows) -> np.ndarray:
    """``weights @ fixed_point(vectors)`` in int64: integer weights times each row in fixed
    point (:func:`fixed_point`), exact, so the same in any order or any split of the rows.

    Like :func:`sparse_times_vectors`, ``vectors`` may be float16 or mapped: rows are
    converted ``ROW_BLOCK`` at a time. Exact while no sum passes 2^63: with 0/1
    weights and vectors of length <= 1, for up to 2^30 rows a column.
    """
    columns = sp.csc_matrix(weights, dtype=np.int64)
    out = np.zeros((columns.shape[0], vectors.shape[1]), dtype=np.int64)
    _add_product(columns, vectors, 0, len(vectors), out, convert=fixed_point)
    return out


def fixed_point(vectors: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Each value times 2^``FIXED_POINT_BITS``, rounded to an int64.

    A float32 of magnitude 2^-9 or more is a multiple of 2^-32, so it converts
    exactly; only smaller values round, by under 2^-33. float16 values are all exact.
    """
    scaled = np.multiply(vectors, 2.0 ** FIXED_POINT_BITS, dtype=np.float64)
    np.rint(scaled, out=scaled)
    if out is None:
        return scaled.astype(np.int64)
    out[...] = scaled
    return out


def _add_product(columns: sp.csc_matrix, vectors: Rows, start: int, stop: int,
                 into: np.ndarray,
                 convert: Callable[[np.ndarray, np.ndarray], object] | None = None) -> None:
    """``into += columns[:, start:stop] @ convert(vectors[start:stop])``, the rows taken in
    order; ``convert(rows, out)`` writes rows in ``into``'s type (a plain copy by default).

    A block of rows that no weight reads is skipped, not read: it would add nothing
    (a refresh's product over the new units or the changed concepts only)."""
    dim = vectors.shape[1]
    buffer = np.empty((min(ROW_BLOCK, stop - start), dim), dtype=into.dtype)
    flat = into.reshape(-1)  # a view: the kernel writes through it
    for low in range(start, stop, ROW_BLOCK):
        high = min(low + ROW_BLOCK, stop)
        if columns.indptr[low] == columns.indptr[high]:
            continue
        rows = buffer[:high - low]
        if convert is None:
            np.copyto(rows, vectors[low:high])
        else:
            convert(vectors[low:high], rows)
        if _csc_matvecs is None:  # pragma: no cover - a scipy without the kernel
            into += columns[:, low:high] @ rows
            continue
        _csc_matvecs(columns.shape[0], high - low, dim, columns.indptr[low:high + 1],
                     columns.indices, columns.data, rows.reshape(-1), flat)


def framework_model_id(framework: str, embedding_object: object) -> str:
    """The id an index records for a framework's embedding object: ``<framework>/<class>/<model>``.

    It is stored with a saved index and checked on load, so it must be stable and
    the same rule for every framework: the class name plus the object's ``model``
    or ``model_name`` attribute when it has one.
    """
    model = getattr(embedding_object, "model", None) or getattr(embedding_object, "model_name",
                                                                None)
    model_id = f"{framework}/{type(embedding_object).__name__}"
    return f"{model_id}/{model}" if isinstance(model, str) and model else model_id


def same_model(recorded: str, given: str) -> bool:
    """Whether two model ids name one model; indexes saved before ``framework_model_id``
    recorded LlamaIndex models as ``llama-index:<class>:<model>``."""
    legacy = re.fullmatch(r"llama-index:([^:/]+):(.*)", recorded)
    if legacy:
        recorded = f"llama-index/{legacy.group(1)}" + (f"/{legacy.group(2)}"
                                                       if legacy.group(2) else "")
    return recorded == given

