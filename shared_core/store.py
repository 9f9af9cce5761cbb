"""Persistence of an index's chunks as a versioned directory of JSON and ``.npy`` files.

Layout (format version 7)::

    my_index/
        CURRENT              the name of the complete version, replaced atomically
        v000007-1a2b3c4d/    manifest.json, chunks.json, terms.json, *.npy
        .lock                serialises saves to this path

A save writes a new version folder beside the current one, fsyncs it, then
replaces ``CURRENT`` in one rename, so at every instant the path holds a complete
index, the old one or the new. The next save removes what killed saves left.

Loading never runs code and never trusts a file: arrays are read with
``allow_pickle=False`` after their header's dtype and shape are checked, and
every rule an index obeys (unique sorted ids and terms, spans inside their texts,
monotonic offsets, finite unit vectors, canonical sparse counts ...) is checked
before anything is built from the data. Checksums in the manifest catch
accidents; the rules catch deliberate edits that would break the index. A
violation raises :class:`CorruptIndexError` naming the file and the rule.

Token counts (``tokens.npy``, ``unit_tokens.npy``, saves since the scale issue's
seventh round) are read, not recounted: recounting was the largest part of a
load. The budget rests on them, so retrieval recounts each unit's text the first
time it returns it and refuses a count that differs (``index._confirm_token_counts``);
no edit can make a context overrun its budget unnoticed. ``verify=True`` recounts
every count at load. Saves without them recount them.

The exception is what deriving the graph again would cost most of a load: the
saved graph's co-occurrence counts (``graph_pair_*.npy``) and, in saves since the
scale issue's sixth round, which terms are concepts, the concept vectors and each
strong pair's cosine decision and margin (``DERIVED_ARRAYS``; since the seventeenth
round also the concept vectors' exact fixed-point sums, which must give the saved
vectors, and since the twenty-first the list of the concepts whose sums are kept).
Their values rest on
their checksums, after the rules that need no re-derivation (sorted in-range
terms, unit-length vectors, margins with their decision's sign;
``state/saved.py``). A wrong value there changes rankings, never a budget or an
index range. ``verify=True`` derives them again and refuses a save that differs:
use it on an index from a source you do not trust. Saves without them re-derive them.

Saves since the scale issue's eleventh round also keep the graph's sparse matrices
(``DERIVED_MATRICES``: which chunks and sentences link which concepts, the units'
links where units are sentence runs, and the units' BM25 weights), each as its
``indptr``, ``indices`` and ``data`` arrays. A load maps them read-only instead of
deriving them from the term counts, which had been most of the rest of a
million-passage load. Their structure is checked (an indptr from 0 that never
decreases, in-range indices strictly increasing within each row, finite positive
values) and so is what a count over the terms can check: each concept is in as many
sentences as its term. Their values rest on the checksum like the concept vectors';
``verify=True`` derives and compares them. Saves without them derive them. Saves
since the twelfth round also keep the concept graph's Dice-weighted adjacency
(``concept_adjacency``), which a load had rebuilt from the pairs' edges: it must hold
each edge of the saved pairs twice, and PageRank must be its fixed point. Saves since
the sixteenth round keep, where queries walk the sentences, the walk's concept ->
sentence postings (``walk_postings``, the sentence links' transpose) and each entry's
unit (``walk_entry_unit.npy``), which a first query had built (3.6 s at a million
passages): each column must hold as many sentences as its concept is in, each unit be
in range; ``verify=True`` derives both and compares. Saves since the eighteenth round
keep the concept links column-major too (``concept_postings``: each concept's chunks),
which a load had transposed from the row-major links (1.4 s and 0.4 GB of heap at a
million passages): each column must hold as many chunks as the links give its
concept; ``verify=True`` transposes the links and compares.

Large arrays are mapped read-only rather than read (the pairs, the spans, the term
counts, the matrices, the embeddings), so a loaded index holds no second copy on its
heap; the embeddings' unit-length check runs on a checksum worker while the load
reads the rest (:meth:`_FileDigests.later`).

Embeddings are memory-mapped on load (format version 3): the OS pages in what
queries touch, and a loaded index holds no second copy. Version 3 also saves the
HNSW index (``ann.faiss``, with ``ann_rows.npy``: each row's vector, -1 once its
chunk is deleted) when the index uses one, and the derived graph's strong pairs
(every concept pair passing theta_co, with its count) and PageRank
(``graph_*.npy``), so that a load restores the graph instead of counting
co-occurrences again. Saves of version 3 without these, or with only the edges
(``graph_edge_*.npy``, written before strong pairs were kept), still load. Version 4
is version 3 with XXH3-128 checksums instead of SHA-256 (``DIGEST``; the manifest's
``digest`` names it): a load checks every file, and that had been a quarter of a
million-passage load. Version 5 keeps the texts as one UTF-8 byte run
(``chunk_texts.npy``) with each text's end (``chunk_text_ends.npy``) instead of in
``chunks.json``: a million texts had taken 3–4 s to parse as JSON. A load decodes each
text strictly (no lone surrogate can pass), refuses a NUL or a blank text, and then
keeps the texts as ranges of the mapped bytes (``state.texts.ChunkTexts``), decoded
again as they are read: no string per chunk on the heap. Version 6 saves an HNSW
index in segments (``ann.faiss``, then ``ann.1.faiss`` ...; the manifest's ``ann`` lists
their row counts), as updates leave it (``search.ann.segment_plan``). Indexes saved in
format versions 1 (one flat folder) to 5 still load; the next save writes version 6.
A version-6 save of an index that searches its concept graph (``concept_search="hnsw"``,
or ``"auto"`` past ``state.derived.CONCEPT_ANN_MIN`` concepts) also holds it, in segments
(``concept_ann.faiss``, ``concept_ann.1.faiss`` ..., mapped on load, with
``concept_ann_rows.npy``, ``concept_ann_drift.npy`` and ``concept_ann_beside.npy``; the
manifest's ``concept_ann`` gives their sizes, and the share of its own concepts' best
matches it found when built, which ``"auto"`` reads; ``search.concepts.ConceptHnsw``). A
save without it, with one segment it does not list, or without that share (its graph
then passes), loads as before. A version-6 save of an index that scans byte codes of its
concept vectors (``concept_search="codes"``, or ``"auto"`` where it scans them) holds
them too (``concept_codes.npy`` and the ``concept_code_*.npy`` they are read with; the
manifest's ``concept_codes`` counts the concepts coded and beside them;
``search.coded_scan.CodedScan``): a first query had coded them, 8.5 s at 1.55 M
concepts. Their values rest on the checksum; ``verify`` decodes every code against its
vector. A save without them loads as before, and so does one with them where faiss is
not installed (``"auto"`` then scans the float32 vectors). Version 7 codes each HNSW
segment's rows in signed bytes by one scale of its own (``search.ann``; the manifest's
``ann`` and ``concept_ann`` list ``scales``). Segments of earlier saves were coded by
ranges trained per dimension; they load as they are, and a later save lists them with a
null scale. Earlier versions of this library refuse a version-7 save by its version.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import math
import mmap
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import scipy.sparse as sp
import xxhash

from .config import ConceptGraphConfig
from .embeddings.base import UNIT_NORM_TOLERANCE, finite_row_norms, same_model
from .embeddings.models import BF16_SUFFIX
from .paging import sequential_reads
from .search.ann import FILE_NAME as ANN_FILE
from .search.ann import ROWS_FILE_NAME as ANN_ROWS_FILE
from .search.ann import HnswSegments, HnswVectorIndex, segment_file
from .search.coded_scan import CodedScan
from .search.concepts import ConceptHnsw
from .search.external import NO_METADATA, EngineRows, VectorRowsBackend
from .state.corpus import VECTOR_DTYPE, CorpusState, sorted_by_id, with_sorted_terms
from .state.derived import GraphMatrices, VectorSearch
from .state.ingest import unit_texts
from .state.rows import Rows, VectorRows, held_rows
from .state.saved import SavedGraph
from .state.spill import csr_over
from .state.texts import ChunkTexts, as_chunk_texts
from .text.hygiene import invalid_character
from .text.tokens import count_tokens_batch

FORMAT = "conceptgraph-index"
VERSION = 7
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7)
POINTER = "CURRENT"
LOCK = ".lock"
_VERSION_NAME = re.compile(r"^v(\d{6,})-([0-9a-f]{8})$")
STORE_GENERATION = "vector_store_generation"  # manifest key (see search.external)
# manifest key: the save holds no sentence vectors, its vector store does (a writer that
# reads them from there: ``ConceptGraphIndex.load(..., vectors_in_store=True, writer=True)``)
VECTORS_IN_STORE = "sentence_vectors_in_store"
# manifest key: how the store's row keys were made. 2: a chunk's metadata is in its keys'
# digest (search.external.chunk_digest); saves without it have text-only digests
STORE_KEYS = "vector_store_keys"
STORE_KEYS_VERSION = 2
_GENERATION = re.compile(r"[0-9a-f]{32}")
# name -> (dtype, ndim)
ARRAYS = {
    "sentence_spans": (np.int64, 2),
    "sentence_offsets": (np.int64, 1),
    "sentence_embeddings": (VECTOR_DTYPE, 2),
    "sentence_terms_data": (np.int32, 1),
    "sentence_terms_indices": (np.int64, 1),
    "sentence_terms_indptr": (np.int64, 1),
    "unit_starts": (np.int64, 1),
}
# written only for chunk_similarity="direct"
OPTIONAL_ARRAYS = {"unit_vectors": (VECTOR_DTYPE, 2)}
# the derived graph's expensive part, checked on load (``state.saved``): the strong pairs
# and PageRank; absent in older saves
GRAPH_ARRAYS = {"graph_pair_source": (np.int32, 1), "graph_pair_target": (np.int32, 1),
                "graph_pair_count": (np.int32, 1), "graph_rank": (np.float64, 1)}
# what a load would otherwise derive again (saves since the scale issue's sixth round):
# which terms are concepts, the concept vectors, each strong pair's cosine decision and
# margin. Taken as read after cheap rules (``state.saved``); ``verify`` re-derives
DERIVED_ARRAYS = {"concept_terms": (np.int64, 1), "concept_vectors": (np.float32, 2),
                  "graph_pair_edge": (np.bool_, 1), "graph_pair_margin": (np.float32, 1),
                  # the concept vectors' fixed-point sums (since the seventeenth round),
                  # which a refresh updates by the changed sentences alone: since the
                  # twenty-first, only those of the concepts listed in summed_concepts
                  # (before, every concept's)
                  "concept_sums": (np.int64, 2), "summed_concepts": (np.int64, 1)}
# the graph's sparse matrices (saves since the scale issue's eleventh round), each as
# <name>_indptr.npy, <name>_indices.npy (one integer type, the manifest's "matrices" index)
# and <name>_data.npy: mapped on load instead of derived again. name -> (data dtype, axis
# the indptr runs over: "csr" rows, "csc" columns)
DERIVED_MATRICES = {"concept_links": (np.float32, "csr"), "sentence_concepts": (np.float32, "csr"),
                    "unit_links": (np.float32, "csr"), "unit_bm25": (np.float64, "csc"),
                    "concept_adjacency": (np.float64, "csr"),
                    "walk_postings": (np.int8, "csc"),
                    "concept_postings": (np.float32, "csc")}
# of those, kept by later saves only, each whole or not at all: the concept adjacency
# since the twelfth round (older saves derive it on load), the walk's postings since the
# sixteenth, where queries walk the sentences (else the first walk builds them), the
# concept links' column-major copy (each concept's chunks) since the eighteenth (else a
# load transposes the links: 1.4 s and 0.4 GB of heap at a million passages)
LATER_MATRICES = ("concept_adjacency", "walk_postings", "concept_postings")
MATRIX_PARTS = ("indptr", "indices", "data")
# beside the walk's postings: each entry's unit, in the matrices' index type
WALK_ENTRY_UNIT = "walk_entry_unit.npy"
_MATRIX_INDEX_TYPES = {"int32": np.int32, "int64": np.int64}
# what saves before strong pairs kept instead of them: the edges alone (still read)
LEGACY_GRAPH_ARRAYS = {"graph_edge_source": (np.int64, 1), "graph_edge_target": (np.int64, 1),
                       "graph_edge_cooccurrence": (np.int64, 1),
                       "graph_rank": (np.float64, 1)}
_V2_VECTOR_DTYPE = np.float32  # what versions 1 and 2 stored embeddings as
# each chunk's and each unit's token count: read in version 3 saves that list them
# (confirmed against the texts as retrieval returns them; ``verify`` recounts all),
# checksummed but recounted in version 1, absent in version 2
TOKEN_ARRAYS = {"tokens": (np.int64, 1), "unit_tokens": (np.int64, 1)}
# the concept HNSW (``concept_search="hnsw"``; ``search.concepts.ConceptHnsw``): the
# graph, each row's concept now and how far it has moved, the concepts scanned beside it
CONCEPT_ANN_STEM = "concept_ann"  # segments: concept_ann.faiss, concept_ann.1.faiss, ...
CONCEPT_ANN_FILE = f"{CONCEPT_ANN_STEM}.faiss"
CONCEPT_ANN_ARRAYS = {"concept_ann_rows": np.int64, "concept_ann_drift": np.float64,
                      "concept_ann_beside": np.int64}
# the concept vectors' byte codes (``concept_search="codes"``; ``search.coded_scan``):
# each coded concept's bytes and position, the concepts beside them, each dimension's
# largest decoding error and the ranges the quantiser was trained on
CONCEPT_CODE_ARRAYS = {"concept_codes": np.uint8, "concept_code_rows": np.int64,
                       "concept_code_beside": np.int64, "concept_code_error": np.float64,
                       "concept_code_low": np.float32, "concept_code_high": np.float32}
# version 5: the texts as one UTF-8 byte run and each text's end in it (chunks.json then
# holds ids and metadata); parsing them as JSON had been a quarter of a million-passage load
TEXT_ARRAYS = {"chunk_texts": (np.uint8, 1), "chunk_text_ends": (np.int64, 1)}
_JSON_FILES = ("chunks.json", "terms.json")

try:  # POSIX advisory locks; elsewhere saves to one path are not serialised
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class CorruptIndexError(ValueError):
    """The directory is not a readable conceptgraph index; the message names file and rule."""


@dataclass(frozen=True, eq=False)
class SavedIndex:
    """What a saved version holds: its chunks and config, and what speeds up its load."""

    corpus: CorpusState
    config: ConceptGraphConfig
    ann: VectorSearch | None
    graph: SavedGraph | None
    store_generation: str | None = None  # of the outside vector store it was saved with
    # the store's rows of chunks with metadata have keys of an older form (STORE_KEYS)
    store_keys_outdated: bool = False


# ------------------------------------------------------------------------------- saving
def save_corpus(path: str | os.PathLike[str], corpus: CorpusState, config: ConceptGraphConfig,
                model_id: str, ann: VectorSearch | None = None,
                graph: SavedGraph | None = None, *,
                store_generation: str | None = None) -> None:
    """Write ``corpus`` as a new version under ``path`` and make it the current one.

    ``ann``, the approximate vector index derived from it (an HNSW index and
    its row map), is saved beside it so that a load maps it instead of
    rebuilding it; ``graph``, the derived graph's strong pairs and PageRank, so
    that a load checks them instead of counting co-occurrences again;
    ``store_generation``, the generation of the outside vector store that holds
    its rows (``search.external``), so that a load need not list the store.
    """
    target = Path(os.path.realpath(path))  # a symlinked path writes where it points
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{target} exists and is not a directory; not overwriting")
    if target.is_dir() and not _is_index(target) and not all(map(_is_ours, target.iterdir())):
        raise FileExistsError(f"{target} exists and is not a conceptgraph index; not overwriting")
    target.mkdir(parents=True, exist_ok=True)
    with _locked(target):
        previous = _VERSION_NAME.match(_current_version(target) or "")
        sequence = int(previous.group(1)) + 1 if previous else 1
        name = f"v{sequence:06d}-{secrets.token_hex(4)}"
        folder = target / name
        dir_mode = target.stat().st_mode & 0o777  # new folders and files keep the index's mode
        folder.mkdir()
        os.chmod(folder, dir_mode)
        try:
            _write_version(folder, corpus, config, model_id, dir_mode & 0o666, ann, graph,
                           store_generation)
            _fsync_path(folder)
            pointer_tmp = target / f".{POINTER}.tmp-{name}"
            _write_file(pointer_tmp, (name + "\n").encode(), dir_mode & 0o666)
            os.replace(pointer_tmp, target / POINTER)
            _fsync_path(target)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        _remove_stale(target, keep=name)


def _write_version(folder: Path, corpus: CorpusState, config: ConceptGraphConfig,
                   model_id: str, file_mode: int, ann: VectorSearch | None,
                   graph: SavedGraph | None, store_generation: str | None = None) -> None:
    terms = corpus.sentence_terms
    arrays: dict[str, Rows] = {
        "sentence_spans": corpus.sentence_spans,
        "sentence_offsets": corpus.sentence_offsets,
        "sentence_terms_data": terms.data,
        "sentence_terms_indices": terms.indices,
        "sentence_terms_indptr": terms.indptr,
        "unit_starts": corpus.unit_starts,
        "tokens": corpus.tokens,
        "unit_tokens": corpus.unit_tokens,
    }
    if config.chunk_similarity == "direct":
        if corpus.unit_vectors is None:
            raise ValueError("chunk_similarity='direct' but the chunks hold no unit vectors")
        arrays["unit_vectors"] = corpus.unit_vectors
    if graph is not None:
        arrays.update(zip(_graph_files(graph.strong),
                          (graph.source, graph.target, graph.cooccurrence, graph.rank),
                          strict=True))
        derived = {"concept_terms": graph.concept_terms, "concept_vectors": graph.vectors,
                   "graph_pair_edge": graph.edge, "graph_pair_margin": graph.margin,
                   "concept_sums": graph.sums, "summed_concepts": graph.summed}
        arrays.update({k: v for k, v in derived.items() if v is not None})
    matrix_index = _matrix_arrays(graph.matrices, arrays) if graph is not None else None
    texts = as_chunk_texts(corpus.texts)
    arrays["chunk_text_ends"] = texts.ends()
    kinds = {**ARRAYS, **OPTIONAL_ARRAYS, **TOKEN_ARRAYS, **LEGACY_GRAPH_ARRAYS,
             **GRAPH_ARRAYS, **DERIVED_ARRAYS, **TEXT_ARRAYS}
    digests: dict[str, str] = {}
    for key, array in arrays.items():
        dtype = kinds[key][0] if key in kinds else array.dtype  # matrices: checked types
        with _new_file(folder / f"{key}.npy", file_mode) as fh:
            if isinstance(array, VectorRows):  # a refreshed graph's concept vectors or sums
                _save_rows(fh, array, key)
            else:
                np.save(fh, np.ascontiguousarray(array, dtype=dtype), allow_pickle=False)
    with _new_file(folder / "chunk_texts.npy", file_mode) as fh:
        _save_bytes(fh, texts.byte_runs(), texts.nbytes)
    vectors_in_store = isinstance(corpus.sentence_vectors, EngineRows)
    if vectors_in_store and not store_generation:
        raise ValueError("the sentence vectors are in the vector store, so a save records "
                         "the store's generation that holds them")
    if not vectors_in_store:  # a store's writer saves none: the store holds them
        with _new_file(folder / "sentence_embeddings.npy", file_mode) as fh:
            _save_rows(fh, corpus.sentence_vectors)
    documents = {
        "chunks.json": {"ids": list(corpus.ids),
                        "metadata": [json.loads(m) for m in corpus.metadata]},
        "terms.json": list(corpus.terms),
    }
    for key, payload in documents.items():
        _write_file(folder / key, json.dumps(payload, ensure_ascii=False).encode("utf-8"),
                    file_mode)
    if ann is not None:
        if not isinstance(ann.index, HnswSegments):
            raise TypeError(f"only an HNSW index is saved, got {type(ann.index).__name__}")
        ann_segments, ann_scales = ann.index.sizes(), ann.index.scales()
        _save_segments(folder, ann.index, "ann", file_mode)
        with _new_file(folder / ANN_ROWS_FILE, file_mode) as fh:
            np.save(fh, np.ascontiguousarray(ann.rows, dtype=np.int64), allow_pickle=False)
    concept_ann = None if graph is None else graph.concept_index
    if concept_ann is not None:
        _save_concept_ann(folder, concept_ann, file_mode)
    concept_codes = None if graph is None else graph.concept_codes
    if concept_codes is not None:
        _save_concept_codes(folder, concept_codes, file_mode)
    for file in sorted(folder.iterdir()):
        digests[file.name] = _file_digest(file)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "digest": DIGEST,
        "embedding_model": model_id,
        "embedding_dim": corpus.dim,
        "config": config.to_dict(),
        "chunks": len(corpus),
        "sentences": len(corpus.sentence_spans),
        "terms": len(corpus.terms),
        "files": digests,
    }
    if ann is not None:
        manifest["ann"] = {"file": ANN_FILE, "rows": len(ann.rows), "row_map": ANN_ROWS_FILE,
                           "segments": ann_segments, "scales": ann_scales}
    if concept_ann is not None:
        entry: dict[str, Any] = {"file": CONCEPT_ANN_FILE, "rows": len(concept_ann.row_concept),
                                 "beside": len(concept_ann.beside),
                                 "segments": concept_ann.graph.sizes(),
                                 "scales": concept_ann.graph.scales()}
        if concept_ann.self_recall is not None:
            entry["self_recall"] = float(concept_ann.self_recall)
        manifest["concept_ann"] = entry
    if concept_codes is not None:
        manifest["concept_codes"] = {"rows": len(concept_codes.rows),
                                     "beside": len(concept_codes.beside)}
    if graph is not None:
        manifest["graph"] = {"concepts": len(graph.rank),
                             "pairs" if graph.strong else "edges": len(graph.source)}
    if matrix_index is not None:
        manifest["matrices"] = {"index": matrix_index}
    if store_generation:
        manifest[STORE_GENERATION] = store_generation
        manifest[STORE_KEYS] = STORE_KEYS_VERSION
    if vectors_in_store:
        manifest[VECTORS_IN_STORE] = True
    _write_file(folder / "manifest.json", json.dumps(manifest, indent=2).encode(), file_mode)


def _save_segments(folder: Path, index: HnswSegments, stem: str, file_mode: int) -> None:
    """Write each HNSW segment to its file (``ann.segment_file``), synced."""
    for position, segment in enumerate(index.segments):
        file = folder / segment_file(position, stem)
        segment.save(file)
        os.chmod(file, file_mode)
        _fsync_path(file)


def _load_segments(folder: Path, manifest: dict[str, Any], stem: str, sizes: list[int],
                   dim: int, wanted_by: str) -> HnswSegments:
    """Map the saved segments of ``sizes`` rows each, coded by the scales the manifest's
    ``stem`` entry lists; a file that is not one is corrupt."""
    scales = _segment_scales(folder, manifest, stem, sizes)
    try:
        return HnswSegments(tuple(
            HnswVectorIndex.load(folder / segment_file(position, stem), size, dim, wanted_by,
                                 scale)
            for position, (size, scale) in enumerate(zip(sizes, scales, strict=True))))
    except ValueError as exc:
        raise CorruptIndexError(str(exc)) from exc


def _segment_scales(folder: Path, manifest: dict[str, Any], key: str,
                    sizes: list[int]) -> list[float | None]:
    """The code scale of each segment of the manifest's ``key`` entry: listed since format
    version 7 (a positive number, or null for a segment coded by trained ranges, kept
    from an earlier save), and None for every segment before it."""
    entry = manifest[key]
    if manifest["version"] < 7:  # every earlier version coded by trained ranges
        if "scales" in entry:
            raise CorruptIndexError(f"{folder}/manifest.json: '{key}' lists 'scales', which "
                                    f"format version {manifest.get('version')} does not have")
        return [None] * len(sizes)
    scales = entry.get("scales")
    if not isinstance(scales, list) or len(scales) != len(sizes) or not all(
            scale is None or (isinstance(scale, float) and math.isfinite(scale) and scale > 0)
            for scale in scales):
        raise CorruptIndexError(f"{folder}/manifest.json: '{key}' must list 'scales', one "
                                f"positive number (or null) for each of its {len(sizes)} "
                                f"segments, got {scales!r}")
    return scales


def _without_scales(entry: object) -> object:
    """A manifest's HNSW entry less its ``scales`` (checked on their own, by
    :func:`_segment_scales`), to compare with the entries earlier versions wrote."""
    return {k: v for k, v in entry.items() if k != "scales"} if isinstance(entry, dict) else entry


def _are_segment_sizes(sizes: object, rows: object) -> TypeGuard[list[int]]:
    """Whether a manifest's segment sizes are counts, at least one, adding up to ``rows``."""
    return (isinstance(sizes, list) and bool(sizes) and all(_is_count(n) for n in sizes)
            and sum(sizes) == rows)


def _save_concept_ann(folder: Path, index: ConceptHnsw, file_mode: int) -> None:
    """Write the concept HNSW's graph (faiss's format) and its row map, drifts and the
    concepts beside it (``.npy``)."""
    _save_segments(folder, index.graph, CONCEPT_ANN_STEM, file_mode)
    _save_typed(folder, CONCEPT_ANN_ARRAYS, (index.row_concept, index.row_drift, index.beside),
                file_mode)


def _save_concept_codes(folder: Path, scan: CodedScan, file_mode: int) -> None:
    """Write the concept codes and what reads them (``CONCEPT_CODE_ARRAYS``, ``.npy``)."""
    _save_typed(folder, CONCEPT_CODE_ARRAYS,
                (scan.codes(), scan.rows, scan.beside, scan.error, scan.low, scan.high),
                file_mode)


def _save_typed(folder: Path, dtypes: dict[str, Any], arrays: Sequence[np.ndarray],
                file_mode: int) -> None:
    """Write each array as ``<name>.npy`` in its dtype, names and dtypes in ``dtypes``' order."""
    for (name, dtype), array in zip(dtypes.items(), arrays, strict=True):
        with _new_file(folder / f"{name}.npy", file_mode) as fh:
            np.save(fh, np.ascontiguousarray(array, dtype=dtype), allow_pickle=False)


def _matrix_arrays(matrices: GraphMatrices | None,
                   arrays: dict[str, Rows]) -> str | None:
    """Add the graph's matrices' parts to ``arrays``; the name of their one index type."""
    if matrices is None:
        return None
    given = {name: getattr(matrices, name) for name in DERIVED_MATRICES}
    present = {name: m for name, m in given.items() if m is not None}
    largest = max(max(m.nnz, *m.shape) for m in present.values())
    index = "int32" if largest < np.iinfo(np.int32).max else "int64"
    for name, matrix in present.items():
        if not matrix.has_sorted_indices:  # the load's rules want each row's in order
            matrix = matrix.sorted_indices()
        arrays[f"{name}_indptr"] = np.asarray(matrix.indptr, dtype=index)
        arrays[f"{name}_indices"] = np.asarray(matrix.indices, dtype=index)
        arrays[f"{name}_data"] = np.asarray(matrix.data, dtype=DERIVED_MATRICES[name][0])
    if matrices.walk_entry_unit is not None:
        arrays[WALK_ENTRY_UNIT.removesuffix(".npy")] = np.asarray(matrices.walk_entry_unit,
                                                                  dtype=index)
    return index


@contextlib.contextmanager
def _new_file(path: Path, mode: int) -> Iterator[Any]:
    """A new file opened for writing, flushed and fsynced on close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


def _write_file(path: Path, payload: bytes, mode: int) -> None:
    with _new_file(path, mode) as fh:
        fh.write(payload)


def _fsync_path(path: Path) -> None:
    """fsync a folder (or a file another library wrote): open read-only, flush to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold the exclusive save lock of ``target`` (released if the process dies)."""
    fd = os.open(target / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _remove_stale(target: Path, keep: str) -> None:
    """Delete every version but ``keep``, pointer temp files, and a version-1 flat layout."""
    for entry in target.iterdir():
        if entry.name in (keep, POINTER, LOCK) or not _is_ours(entry):
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _is_ours(entry: Path) -> bool:
    """Whether a directory entry is something a save writes (so a later save may remove it)."""
    if entry.is_dir():
        return bool(_VERSION_NAME.match(entry.name))
    return (entry.name in (POINTER, LOCK) or entry.name.startswith(f".{POINTER}.tmp-")
            or entry.name in _v1_file_names())


def _v1_file_names() -> set[str]:
    names = {f"{n}.npy" for n in {**ARRAYS, **OPTIONAL_ARRAYS, **TOKEN_ARRAYS}}
    return names | set(_JSON_FILES) | {"manifest.json"}


def _is_index(root: Path) -> bool:
    return (root / POINTER).is_file() or (root / "manifest.json").is_file()


def _current_version(root: Path) -> str | None:
    """The version ``CURRENT`` names, checked to be a plain version name (no path tricks)."""
    pointer = root / POINTER
    if not pointer.is_file():
        return None
    try:
        name = pointer.read_text(encoding="ascii").strip()
    except (UnicodeDecodeError, OSError) as exc:
        raise CorruptIndexError(f"{pointer} is unreadable: {exc}") from exc
    if not _VERSION_NAME.match(name):
        raise CorruptIndexError(f"{pointer} does not name a version folder (got {name[:40]!r})")
    return name


# Each file's checksum in the manifest ("files"). Version 4 saves name the algorithm
# ("digest"): XXH3-128, at 13 GB/s a core on this machine against SHA-256's 0.6, so a
# million-passage index's 11.6 GB are checked in about a second instead of ten. It
# detects corruption and edits, as SHA-256 did here; neither is a signature, since
# whoever can edit a file can edit the manifest. Versions 1-3 hold SHA-256 digests.
DIGEST = "xxh3_128"
_LEGACY_DIGEST = "sha256"
_HASHERS: dict[str, Callable[..., Any]] = {"xxh3_128": xxhash.xxh3_128,
                                          "sha256": hashlib.sha256}


def bytes_digest(data: bytes, manifest: dict[str, Any] | None = None) -> str:
    """The checksum ``manifest`` (a new save's, by default) lists for a file holding ``data``."""
    algorithm = DIGEST if manifest is None else _digest_algorithm(Path("."), manifest)
    return str(_HASHERS[algorithm](data).hexdigest())


# where a load's rules over a whole mapped array run (:meth:`_FileDigests.later`)
Later = Callable[[Callable[[], None]], None]


def _now(rule: Callable[[], None]) -> None:
    """Check ``rule`` here and now (a :data:`Later` for reads outside a load's digests)."""
    rule()


def _file_digest(path: Path, algorithm: str = DIGEST) -> str:
    """The file's checksum, taken from a read-only mapping in one update: neither hasher
    holds the GIL while it runs, so other threads go on meanwhile (:class:`_FileDigests`)."""
    digest = _HASHERS[algorithm]()
    with path.open("rb") as fh:
        if os.fstat(fh.fileno()).st_size:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                digest.update(mapped)
    return str(digest.hexdigest())


def _digest_algorithm(folder: Path, manifest: dict[str, Any]) -> str:
    """The algorithm of a manifest's checksums: named since version 4, SHA-256 before."""
    if manifest.get("version", VERSION) < 4:
        return _LEGACY_DIGEST
    named = manifest.get("digest")
    if named not in _HASHERS:
        raise CorruptIndexError(f"{folder}/manifest.json: 'digest' must name one of "
                                f"{', '.join(sorted(_HASHERS))}, got {named!r}")
    return str(named)


# ------------------------------------------------------------------------------- loading
def index_folder(path: str | os.PathLike[str]) -> Path:
    """The folder holding the current version's files (the index itself for version 1)."""
    root = Path(path)
    if not root.is_dir():
        raise CorruptIndexError(f"{root} is not a directory: not a conceptgraph index")
    name = _current_version(root)
    if name is not None:
        return root / name
    if (root / "manifest.json").is_file():
        return root
    raise CorruptIndexError(f"{root} has no manifest.json: not a conceptgraph index")


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The current version's manifest, with its format and version checked."""
    folder = index_folder(path)
    try:
        return _manifest_in(folder)
    except FileNotFoundError as exc:
        raise CorruptIndexError(f"{folder} is missing manifest.json") from exc


def _manifest_in(folder: Path) -> dict[str, Any]:
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():  # a version replaced mid-read, or a lost file
        raise FileNotFoundError(2, "missing", str(manifest_path))
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptIndexError(f"{manifest_path} is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorruptIndexError(f"{manifest_path}: not a conceptgraph index (bad manifest format)")
    if manifest.get("version") not in READABLE_VERSIONS:
        raise CorruptIndexError(
            f"{manifest_path}: index format version {manifest.get('version')!r}; "
            f"this conceptgraph reads versions {', '.join(map(str, READABLE_VERSIONS))}. "
            "Rebuild the index from its texts with this version (ConceptGraphIndex.from_texts "
            "or `conceptgraph build`)"
        )
    return manifest


def load_corpus(path: str | os.PathLike[str], model_id: str,
                dim: int, *, verify: bool = False,
                vectors_from: VectorRowsBackend | None = None) -> SavedIndex:
    """Read and check the current version; retried if a save replaces it mid-read.

    Also returns the saved approximate vector index, mapped, if the version has one.
    ``verify`` recounts saved token counts and refuses a save whose counts differ.
    ``vectors_from``: a store that holds the sentence vectors, read from it row by row
    (:class:`~shared_core.search.external.EngineRows`); the save's own file of them is
    then neither read nor needed.
    """
    for _ in range(5):
        folder = index_folder(path)
        try:
            return _load_folder(folder, model_id, dim, verify, vectors_from)
        except FileNotFoundError as exc:
            if index_folder(path) == folder:  # nobody replaced it: the index lost a file
                raise CorruptIndexError(f"{folder} is missing {Path(str(exc.filename)).name}") \
                    from exc
    raise CorruptIndexError(f"{path} kept changing while being read (five saves in a row)")


def _load_folder(folder: Path, model_id: str, dim: int, verify: bool,
                 vectors_from: VectorRowsBackend | None = None) -> SavedIndex:
    manifest = _manifest_in(folder)
    version = manifest["version"]
    built_with = (manifest.get("embedding_model"), manifest.get("embedding_dim"))
    if not isinstance(built_with[0], str) or not isinstance(built_with[1], int) \
            or isinstance(built_with[1], bool) or built_with[1] < 1:
        raise CorruptIndexError(f"{folder}/manifest.json: embedding_model must be a string "
                                f"and embedding_dim a positive int, got {built_with!r}")
    if not same_model(built_with[0], model_id) or built_with[1] != dim:
        raise ValueError(
            f"{folder} was built with embedding model {manifest.get('embedding_model')!r} "
            f"(dim {manifest.get('embedding_dim')}), but the embedder given is "
            f"{model_id!r} (dim {dim}); query vectors would not be comparable"
            + _precision_hint(built_with[0], model_id)
        )
    config = _read_config(folder, manifest)
    kinds = dict(ARRAYS)
    if config.chunk_similarity == "direct":
        kinds.update(OPTIONAL_ARRAYS)
    in_store = manifest.get(VECTORS_IN_STORE, False)
    if in_store is not False and in_store is not True:
        raise CorruptIndexError(f"{folder}/manifest.json: '{VECTORS_IN_STORE}' must be true "
                                f"or false, got {in_store!r}")
    if in_store and vectors_from is None:
        raise ValueError(f"{folder} holds no sentence vectors: its vector store does. Load it "
                         "with vector_store=<that store> and vectors_in_store=True")
    if vectors_from is not None:
        if version == 1:  # its chunks are put in order on load, vectors and all
            raise ValueError(f"{folder} is a version-1 save, which no store's rows follow; "
                             "load it with its vectors and save it again")
        if config.chunk_similarity != "max":
            raise ValueError(
                f"{folder} compares units by {config.chunk_similarity!r} vectors; an index "
                "reads its vectors from the store only where a unit's similarity is its best "
                "sentence's (chunk_similarity='max', the default)")
        del kinds["sentence_embeddings"]
    counts_saved = _saved_token_counts(folder, manifest, version)
    if version == 1 or counts_saved:
        kinds.update(TOKEN_ARRAYS)
    counts: dict[str, int] = {}
    for key in ("chunks", "sentences", "terms"):
        value = manifest.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CorruptIndexError(f"{folder}/manifest.json: '{key}' must be a count, "
                                    f"got {value!r}")
        counts[key] = value
    unread = frozenset() if vectors_from is None else frozenset({"sentence_embeddings.npy"})
    with _FileDigests(folder, manifest, first=_JSON_FILES, unread=unread) as digests:
        digests.check(list(_JSON_FILES))
        # the arrays' digests are taken on the other core while the JSON is parsed
        if version >= 5:
            digests.check([f"{name}.npy" for name in TEXT_ARRAYS])
        ids, texts, metadata, text_length = _read_chunks(
            folder / "chunks.json", counts["chunks"], require_sorted=version > 1,
            texts_saved=version >= 5)
        terms = _read_terms(folder / "terms.json", counts["terms"], require_sorted=version > 1)
        digests.check([f"{n}.npy" for n in kinds])
        stored = _stored_derived(folder, manifest, version, digests)
        corpus = _read_arrays(folder, config, dim, ids, texts, text_length, metadata, terms,
                              counts["sentences"], version, counts_saved, verify,
                              digests.later, vectors_from)
        if version == 1:  # older indexes kept insertion order: put them in canonical order
            corpus = sorted_by_id(with_sorted_terms(corpus))
        generation = _read_store_generation(folder, manifest)
        saved = SavedIndex(corpus, config, _read_ann(folder, manifest, corpus, config, digests),
                           _read_graph(folder, manifest, stored, corpus, digests,
                                       _optional_files(manifest, version)),
                           generation,
                           generation is not None and _store_keys_outdated(folder, manifest,
                                                                           corpus))
        digests.settle()  # the checks have read the vectors through (in order)
        return saved


def _read_store_generation(folder: Path, manifest: dict[str, Any]) -> str | None:
    value = manifest.get(STORE_GENERATION)
    if value is None:
        return None
    if not isinstance(value, str) or not _GENERATION.fullmatch(value):
        raise CorruptIndexError(f"{folder}/manifest.json: '{STORE_GENERATION}' must be 32 "
                                f"hex digits, got {str(value)[:80]!r}")
    return value


def _store_keys_outdated(folder: Path, manifest: dict[str, Any], corpus: CorpusState) -> bool:
    """Whether the store's rows of this save's chunks have keys of an older form: a save
    from before ``STORE_KEYS``, some of whose chunks have metadata (the keys of chunks
    without it have not changed)."""
    value = manifest.get(STORE_KEYS)
    if value is None:
        return any(m != NO_METADATA for m in corpus.metadata)
    if value != STORE_KEYS_VERSION or isinstance(value, bool):
        raise CorruptIndexError(f"{folder}/manifest.json: '{STORE_KEYS}' must be "
                                f"{STORE_KEYS_VERSION}, got {repr(value)[:80]}")
    return False


def _precision_hint(recorded: str, given: str) -> str:
    """What to pass when an index was built with the same model at another precision
    (``precision="auto"`` picks bf16 only where the hardware has it)."""
    if recorded == given or recorded.removesuffix(BF16_SUFFIX) != given.removesuffix(BF16_SUFFIX):
        return ""
    wanted = "bf16" if recorded.endswith(BF16_SUFFIX) else "fp32"
    return (f". It is the same model at another precision: load it with "
            f"minilm_embedder(precision={wanted!r}) (or your embedder's equivalent)")


def _optional_files(manifest: dict[str, Any], version: int) -> dict[str, Any]:
    """The files a version-3 manifest lists, where optional ones are looked up ({} before)."""
    files = manifest.get("files")
    return files if version >= 3 and isinstance(files, dict) else {}


def _saved_token_counts(folder: Path, manifest: dict[str, Any], version: int) -> bool:
    """Whether the version holds token counts to read (version 3 saves that list both)."""
    files = _optional_files(manifest, version)
    listed = [f"{name}.npy" in files for name in TOKEN_ARRAYS]
    if any(listed) and not all(listed):
        raise CorruptIndexError(f"{folder}/manifest.json lists one of tokens.npy and "
                                "unit_tokens.npy without the other")
    return all(listed)


def _stored_derived(folder: Path, manifest: dict[str, Any], version: int,
                    digests: _FileDigests) -> set[str]:
    """Which of ``DERIVED_ARRAYS`` the version holds, their checksums checked."""
    files = _optional_files(manifest, version)
    names = {name for name in DERIVED_ARRAYS if f"{name}.npy" in files}
    if len(names & {"graph_pair_edge", "graph_pair_margin"}) == 1:
        raise CorruptIndexError(f"{folder}/manifest.json lists one of graph_pair_edge.npy "
                                "and graph_pair_margin.npy without the other")
    digests.check([f"{name}.npy" for name in sorted(names)])
    return names


def _graph_files(strong: bool) -> list[str]:
    """The saved graph's array names: source, target, count, PageRank."""
    return list(GRAPH_ARRAYS if strong else LEGACY_GRAPH_ARRAYS)


def _read_graph(folder: Path, manifest: dict[str, Any], stored: set[str],
                corpus: CorpusState, digests: _FileDigests,
                files: dict[str, Any]) -> SavedGraph | None:
    """The saved pairs (or, in older saves, edges) and PageRank, and what of the rest
    of the graph the save holds, shapes checked; their content is checked on restore."""
    dim = corpus.dim
    entry = manifest.get("graph")
    if entry is None:
        return None
    strong = isinstance(entry, dict) and set(entry) == {"concepts", "pairs"}
    sizes = entry if strong or (isinstance(entry, dict)
                                and set(entry) == {"concepts", "edges"}) else {}
    kind = "pairs" if strong else "edges"
    if not all(isinstance(sizes.get(k), int) and not isinstance(sizes.get(k), bool)
               and sizes[k] >= 0 for k in ("concepts", kind)):
        raise CorruptIndexError(f"{folder}/manifest.json: 'graph' must be "
                                f"{{'concepts': <count>, 'pairs': <count>}}, got {entry!r}")
    names = _graph_files(strong)
    kinds = GRAPH_ARRAYS if strong else LEGACY_GRAPH_ARRAYS
    digests.check([f"{name}.npy" for name in names])
    pairs = (sizes[kind],)
    source, target, count = (_read_npy(folder / f"{name}.npy", kinds[name][0], pairs,
                                       mapped=True) for name in names[:3])
    concepts = sizes["concepts"]
    rank = _read_npy(folder / f"{names[3]}.npy", np.float64, (concepts,))
    shapes: dict[str, tuple[int | None, ...]] = {
        "concept_terms": (concepts,), "concept_vectors": (concepts, dim),
        "concept_sums": (None, dim), "summed_concepts": (None,),
        "graph_pair_edge": pairs, "graph_pair_margin": pairs}
    if not strong:
        stored = stored - {"graph_pair_edge", "graph_pair_margin"}
    read = {name: _read_npy(folder / f"{name}.npy", DERIVED_ARRAYS[name][0], shapes[name],
                            mapped=True)
            for name in sorted(stored & set(shapes))}
    matrices = (_read_matrices(folder, manifest, files, corpus, concepts, digests)
                if "concept_terms" in read else None)
    concept_index = _read_concept_ann(folder, manifest, dim, concepts, digests)
    concept_codes = _read_concept_codes(folder, manifest, dim, concepts, digests)
    return SavedGraph(source, target, count, rank, strong=strong,
                      concept_index=concept_index, concept_codes=concept_codes,
                      concept_terms=read.get("concept_terms"),
                      vectors=read.get("concept_vectors"), sums=read.get("concept_sums"),
                      summed=read.get("summed_concepts"),
                      edge=read.get("graph_pair_edge"), margin=read.get("graph_pair_margin"),
                      matrices=matrices)


def _read_concept_ann(folder: Path, manifest: dict[str, Any], dim: int, concepts: int,
                      digests: _FileDigests) -> ConceptHnsw | None:
    """The saved concept HNSW, mapped, shapes and positions checked (what it holds is
    checked against the concepts on restore: ``ConceptHnsw.check_holds``)."""
    entry = manifest.get("concept_ann")
    if entry is None:
        return None
    rows = entry.get("rows") if isinstance(entry, dict) else None
    beside = entry.get("beside") if isinstance(entry, dict) else None
    # saves of the thirty-seventh round's code held one segment and did not list it, and
    # saves before the fortieth round's no self recall (``ConceptHnsw.self_recall``)
    sizes = entry.get("segments", [rows]) if isinstance(entry, dict) else None
    recall = entry.get("self_recall") if isinstance(entry, dict) else None
    listed = {"file": CONCEPT_ANN_FILE, "rows": rows, "beside": beside}
    if _without_scales(entry) not in (
            listed, {**listed, "segments": sizes},
            {**listed, "segments": sizes, "self_recall": recall}) \
            or not _is_count(rows) or not _is_count(beside) or not _are_segment_sizes(sizes, rows) \
            or ("self_recall" in entry and not _is_share(recall)):
        raise CorruptIndexError(f"{folder}/manifest.json: 'concept_ann' must be {{'file': "
                                f"'{CONCEPT_ANN_FILE}', 'rows': <count>, 'beside': <count>, "
                                f"'segments': <counts adding up to rows>, 'self_recall': "
                                f"<share in [0, 1]>, 'scales': <one for each segment>}}, "
                                f"got {entry!r}")
    rows, beside = int(entry["rows"]), int(entry["beside"])
    files = [segment_file(i, CONCEPT_ANN_STEM) for i in range(len(sizes))]
    digests.check([*files, *(f"{name}.npy" for name in CONCEPT_ANN_ARRAYS)])
    row_concept, row_drift, beside_concepts = (
        _read_npy(folder / f"{name}.npy", dtype, (size,))
        for (name, dtype), size in zip(CONCEPT_ANN_ARRAYS.items(), (rows, rows, beside),
                                       strict=True))
    _check_positions(folder, {"concept_ann_rows": row_concept,
                              "concept_ann_beside": beside_concepts}, concepts, least=-1)
    graph = _load_segments(folder, manifest, CONCEPT_ANN_STEM, sizes, dim,
                           "concept_search='hnsw'")
    return ConceptHnsw(graph, row_concept, row_drift, beside_concepts,
                       None if recall is None else float(recall))


def _check_positions(folder: Path, named: dict[str, np.ndarray], concepts: int,
                     least: int) -> None:
    """Refuse a file of concept positions outside ``least`` .. ``concepts - 1``."""
    for name, positions in named.items():
        if len(positions) and (positions.min() < least or positions.max() >= concepts):
            raise CorruptIndexError(f"{folder}/{name}.npy must hold positions of the "
                                    f"{concepts} concepts")


def _read_concept_codes(folder: Path, manifest: dict[str, Any], dim: int, concepts: int,
                        digests: _FileDigests) -> CodedScan | None:
    """The saved concept codes, shapes and positions checked (which concepts they hold is
    checked on restore: ``CodedScan.check_holds``; what they say rests on the checksum,
    and ``verify`` decodes every code: ``CodedScan.check_bound``)."""
    from .search.ann import ann_available

    entry = manifest.get("concept_codes")
    if entry is None or not ann_available():  # without faiss, "auto" scans the floats
        return None
    if not (isinstance(entry, dict) and set(entry) == {"rows", "beside"}
            and _is_count(entry["rows"]) and _is_count(entry["beside"])):
        raise CorruptIndexError(f"{folder}/manifest.json: 'concept_codes' must be {{'rows': "
                                f"<count>, 'beside': <count>}}, got {entry!r}")
    rows, beside = int(entry["rows"]), int(entry["beside"])
    digests.check([f"{name}.npy" for name in CONCEPT_CODE_ARRAYS])
    shapes = {"concept_codes": (rows, None), "concept_code_rows": (rows,),
              "concept_code_beside": (beside,), "concept_code_error": (dim,),
              "concept_code_low": (dim,), "concept_code_high": (dim,)}
    read = {name: _read_npy(folder / f"{name}.npy", dtype, shapes[name],
                            mapped=name == "concept_codes")
            for name, dtype in CONCEPT_CODE_ARRAYS.items()}
    _check_positions(folder, {name: read[name] for name in ("concept_code_rows",
                                                            "concept_code_beside")},
                     concepts, least=0)
    try:
        return CodedScan.of_codes(
            read["concept_codes"], read["concept_code_rows"], read["concept_code_error"],
            read["concept_code_low"], read["concept_code_high"], read["concept_code_beside"])
    except ValueError as exc:
        raise CorruptIndexError(f"{folder}: {exc}") from exc


def _read_matrices(folder: Path, manifest: dict[str, Any], files: dict[str, Any],
                   corpus: CorpusState, concepts: int,
                   digests: _FileDigests) -> GraphMatrices | None:
    """The graph's saved sparse matrices, mapped, each one's structure checked (None in
    saves without them). Their values rest on the checksum, like the concept vectors'."""
    units = len(corpus.unit_offsets()) - 1
    shapes = {"concept_links": (len(corpus), concepts),
              "sentence_concepts": (len(corpus.sentence_spans), concepts),
              "unit_bm25": (units, len(corpus.terms))}
    if corpus.has_units:
        shapes["unit_links"] = (units, concepts)
    names = [f"{name}_{part}.npy" for name in DERIVED_MATRICES for part in MATRIX_PARTS]
    listed = {name for name in [*names, WALK_ENTRY_UNIT] if name in files}
    if not listed:
        return None
    wanted = [f"{name}_{part}.npy" for name in shapes for part in MATRIX_PARTS]
    later_shapes = {"concept_adjacency": (concepts, concepts),
                    "walk_postings": (len(corpus.sentence_spans), concepts),
                    "concept_postings": (len(corpus), concepts)}
    later_files = {name: [f"{name}_{part}.npy" for part in MATRIX_PARTS]
                   + ([WALK_ENTRY_UNIT] if name == "walk_postings" else [])
                   for name in LATER_MATRICES}
    for name, parts in later_files.items():
        if set(parts) <= listed:
            shapes[name] = later_shapes[name]
            wanted += parts
    if listed != set(wanted):
        later = "; ".join(f"all or none of {', '.join(parts)}"
                          for parts in later_files.values())
        raise CorruptIndexError(f"{folder}/manifest.json must list all of "
                                f"{', '.join(sorted(wanted))} ({later}), or none of them")
    entry = manifest.get("matrices")
    index = entry.get("index") if isinstance(entry, dict) and set(entry) == {"index"} else None
    if not isinstance(index, str) or index not in _MATRIX_INDEX_TYPES:
        raise CorruptIndexError(f"{folder}/manifest.json: 'matrices' must be {{'index': "
                                f"'int32' or 'int64'}}, got {str(entry)[:80]!r}")
    digests.check(wanted)
    read = {name: _read_sparse(folder, name, shape, _MATRIX_INDEX_TYPES[index], digests.later)
            for name, shape in shapes.items()}
    walk = read.get("walk_postings")
    entry_unit = None if walk is None else _read_entry_units(
        folder / WALK_ENTRY_UNIT, _MATRIX_INDEX_TYPES[index], walk.nnz, units, digests.later)
    return GraphMatrices(read["concept_links"], read["sentence_concepts"],
                         read.get("unit_links"), read["unit_bm25"],
                         read.get("concept_adjacency"), walk, entry_unit,
                         read.get("concept_postings"))


def _read_entry_units(file: Path, index: type, nnz: int, units: int,
                      later: Later = _now) -> np.ndarray:
    """The unit of each of the walk postings' ``nnz`` entries, mapped, each in range.
    Which unit rests on the checksum (``verify=True`` derives and compares it)."""
    entry_unit = _read_npy(file, index, (nnz,), mapped=True)
    later(lambda: _rule(file, not nnz or (int(entry_unit.min()) >= 0
                                          and int(entry_unit.max()) < units),
                        f"every unit must be in [0, {units})"))
    return entry_unit


def _read_sparse(folder: Path, name: str, shape: tuple[int, int],
                 index: type, later: Later = _now) -> sp.csr_matrix | sp.csc_matrix:
    """One saved matrix, mapped: a canonical compressed structure (an indptr from 0 that
    never decreases, in-range indices strictly increasing within each row or column)
    with finite, positive values. ``later`` takes the rules over every entry (nothing
    reads an entry before the load has settled them); the indptr's are checked here."""
    dtype, axis = DERIVED_MATRICES[name]
    major, minor = shape if axis == "csr" else shape[::-1]
    file = {part: folder / f"{name}_{part}.npy" for part in MATRIX_PARTS}
    indptr = _read_npy(file["indptr"], index, (major + 1,), mapped=True)
    _rule(file["indptr"], int(indptr[0]) == 0 and bool(np.all(indptr[1:] >= indptr[:-1])),
          "must start at 0 and never decrease")
    nnz = int(indptr[-1])
    indices = _read_npy(file["indices"], index, (nnz,), mapped=True)
    data = _read_npy(file["data"], dtype, (nnz,), mapped=True)

    def entry_rules() -> None:
        _rule(file["indices"], not nnz or (int(indices.min()) >= 0
                                           and int(indices.max()) < minor),
              f"every index must be in [0, {minor})")
        _rule(file["indices"], _increasing_within(indptr, indices),
              f"indices must increase strictly within each "
              f"{'row' if axis == 'csr' else 'column'}")
        _rule(file["data"], bool(np.all(data > 0)) and bool(np.all(np.isfinite(data))),
              "values must be finite and positive")

    later(entry_rules)
    kind = sp.csr_matrix if axis == "csr" else sp.csc_matrix
    matrix = kind((data, indices, indptr), shape=shape)
    matrix.has_canonical_format = True  # the rules above: sorted, each entry once
    return matrix


def _read_ann(folder: Path, manifest: dict[str, Any], corpus: CorpusState,
              config: ConceptGraphConfig, digests: _FileDigests) -> VectorSearch | None:
    """The saved approximate index and its row map, checksums and shapes checked first.

    Every vector must be indexed exactly once; other rows are dead (-1). Indexes
    saved before row maps existed indexed every vector in order; before segments
    (version 6), in one segment.
    """
    entry = manifest.get("ann")
    if entry is None:
        return None
    rows = entry.get("rows") if isinstance(entry, dict) else None
    row_map = entry.get("row_map") if isinstance(entry, dict) else None
    sizes = entry.get("segments", [rows]) if isinstance(entry, dict) else None
    if _without_scales(entry) not in ({"file": ANN_FILE, "rows": rows},
                                      {"file": ANN_FILE, "rows": rows, "row_map": ANN_ROWS_FILE},
                                      {"file": ANN_FILE, "rows": rows, "row_map": ANN_ROWS_FILE,
                                       "segments": sizes}) \
            or not _is_count(rows) or not _are_segment_sizes(sizes, rows):
        raise CorruptIndexError(f"{folder}/manifest.json: 'ann' must be "
                                f"{{'file': '{ANN_FILE}', 'rows': <count>, 'row_map': "
                                f"'{ANN_ROWS_FILE}', 'segments': <counts adding up to rows>, "
                                f"'scales': <one for each segment>}}, "
                                f"got {entry!r}")
    rows = int(entry["rows"])
    files = [segment_file(i) for i in range(len(sizes))]
    digests.check(files + ([ANN_ROWS_FILE] if row_map else []))
    vectors = (len(corpus.sentence_spans) if config.chunk_similarity == "max"
               else len(corpus.unit_offsets()) - 1)
    if row_map:
        where = _read_npy(folder / ANN_ROWS_FILE, np.int64, (rows,))
        live = where[where >= 0]
        if where.min(initial=0) < -1 or not np.array_equal(
                np.sort(live), np.arange(vectors)):
            raise CorruptIndexError(f"{folder}/{ANN_ROWS_FILE} must map {rows} rows to each of "
                                    f"the {vectors} vectors once (-1 for a dead row)")
    else:
        where = np.arange(rows, dtype=np.int64)
    return VectorSearch(_load_segments(folder, manifest, "ann", sizes, corpus.dim,
                                       "vector_index='hnsw'"), where)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_share(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and 0.0 <= value <= 1.0)


def _read_config(folder: Path, manifest: dict[str, Any]) -> ConceptGraphConfig:
    raw = manifest.get("config")
    if not isinstance(raw, dict):
        raise CorruptIndexError(f"{folder}/manifest.json: 'config' must be an object")
    # indexes saved before a knob existed were built as it then worked
    legacy = {"select_by": "chunks", "cjk_segmenter": "none"}
    try:
        config = ConceptGraphConfig.from_dict({**legacy, **raw})
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptIndexError(f"{folder}/manifest.json has an unreadable config: {exc}") from exc
    if config.cjk_segmenter == "auto":
        raise CorruptIndexError(f"{folder}/manifest.json: cjk_segmenter must be resolved, "
                                "not 'auto'")
    return config


class _FileDigests:
    """The checksum of every file a manifest lists, taken on worker threads as a load starts.

    The hashers and file reads release the GIL, so the digests of the large arrays are
    taken on the other core while the loading thread parses and checks the JSON.
    A file is still checked against its digest before it is read (:meth:`check`).
    """

    WORKERS = 2

    def __init__(self, folder: Path, manifest: dict[str, Any], first: tuple[str, ...],
                 unread: frozenset[str] = frozenset()) -> None:
        self.folder = folder
        self.algorithm = _digest_algorithm(folder, manifest)
        listed = manifest.get("files")
        self.expected: dict[str, Any] | None = listed if isinstance(listed, dict) else None
        self._pool = ThreadPoolExecutor(self.WORKERS, thread_name_prefix="conceptgraph-digest")
        self._digests: dict[str, Future[str]] = {}
        self._later: list[Future[None]] = []
        names = [n for n in (self.expected or {}) if _is_plain_name(n) and n not in unread]
        for name in sorted(names, key=lambda n: (n not in first, n)):
            if (folder / name).is_file():
                self._digests[name] = self._pool.submit(_file_digest, folder / name,
                                                        self.algorithm)

    def __enter__(self) -> _FileDigests:
        return self

    def later(self, rule: Callable[[], None]) -> None:
        """Check ``rule`` on a worker thread, after the digests, while this thread reads
        on: for rules over the largest mapped files (the embeddings' norms were 1.8 s of a
        million-passage load). :meth:`settle` waits for them and raises what they raised."""
        self._later.append(self._pool.submit(rule))

    def settle(self) -> None:
        """Wait for the rules given to :meth:`later`; raise the first one's error."""
        for pending in self._later:
            pending.result()

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def check(self, needed: list[str]) -> None:
        """Raise unless every ``needed`` file is listed, present and matches its digest."""
        if self.expected is None:
            raise CorruptIndexError(f"{self.folder}/manifest.json lists no files")
        missing = sorted(set(needed) - set(self.expected))
        if missing:
            raise CorruptIndexError(f"{self.folder}/manifest.json does not list "
                                    f"{', '.join(missing)}")
        for name in needed:
            file = self.folder / name
            if not file.is_file():
                raise FileNotFoundError(2, "missing", str(file))
            pending = self._digests.get(name)
            digest = (_file_digest(file, self.algorithm) if pending is None
                      else pending.result())
            if digest != self.expected[name]:
                raise CorruptIndexError(f"{file} does not match its checksum: the index "
                                        "is corrupt")


def _is_plain_name(name: object) -> bool:
    """A manifest entry naming a file directly inside the version folder."""
    return isinstance(name, str) and bool(name) and "/" not in name and "\\" not in name \
        and name not in (".", "..")


def _rule(file: Path, ok: bool, rule: str) -> None:
    if not ok:
        raise CorruptIndexError(f"{file}: {rule}")


def _read_json(file: Path) -> tuple[Any, bool]:
    """The parsed file, and whether its strings may hold a character no text may hold.

    Strict UTF-8 cannot carry a lone surrogate, and strict JSON holds no raw control
    character in a string, so a NUL or a surrogate gets into a parsed string only
    through a ``\\u`` escape. A file without one (our saves escape nothing else but
    control characters) needs no pass over every string; one with one gets it.
    """
    try:
        # bytes decoded at once: a text-mode read (newline translation) took twice as long
        raw = file.read_bytes()
        return json.loads(raw.decode("utf-8")), b"\\u" in raw
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise CorruptIndexError(f"{file} is not valid JSON: {exc}") from exc


def _check_strings(file: Path, values: Any, what: str, count: int,
                   escaped: bool = True) -> list[str]:
    """A list of ``count`` non-blank strings; ``escaped``: they may hold any character
    (:func:`_read_json`), so every one is checked for those no text may hold."""
    _rule(file, isinstance(values, list), f"{what} must be a list")
    _rule(file, len(values) == count, f"{what} has {len(values)} entries, the manifest says "
                                      f"{count}")
    try:  # one pass in C (str.strip refuses a non-string); the loop only names the culprit
        nonblank = all(map(str.strip, values))
    except TypeError:
        nonblank = False
    if not nonblank:
        for i, value in enumerate(values):
            _rule(file, isinstance(value, str) and bool(value.strip()),
                  f"{what}[{i}] must be a non-blank string")
    if escaped:
        _check_characters(file, values, what)
    return values


def _check_characters(file: Path, values: list[str], what: str) -> None:
    """Refuse a value holding a character no text may hold, naming the first such one."""
    if invalid_character("".join(values)) is None:  # one pass in C; then find which
        return
    for i, value in enumerate(values):
        bad = invalid_character(value)
        _rule(file, bad is None, f"{what}[{i}] contains {bad[1] if bad else ''}")


def _check_unique_sorted(file: Path, values: list[str], what: str, require_sorted: bool) -> None:
    _rule(file, len(set(values)) == len(values), f"{what} must be unique")
    if require_sorted:
        _rule(file, all(a < b for a, b in itertools.pairwise(values)),
              f"{what} must be in sorted order")


# metadata as the JSON text a state holds (``json.dumps`` with these options, one encoder)
_METADATA_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def _read_chunks(file: Path, count: int, require_sorted: bool, texts_saved: bool = False
                 ) -> tuple[list[str], Sequence[str], list[str], np.ndarray]:
    """Ids, texts, metadata (as JSON text) and the texts' lengths in characters;
    ``texts_saved``: the texts are read from ``TEXT_ARRAYS`` beside ``file``
    (version 5), not from it."""
    payload, escaped = _read_json(file)
    _rule(file, isinstance(payload, dict), "must be an object with ids, texts and metadata")
    ids = _check_strings(file, payload.get("ids"), "ids", count, escaped)
    _check_unique_sorted(file, ids, "ids", require_sorted)
    texts: Sequence[str]
    if texts_saved:
        texts, lengths = _read_texts(file.parent, count)
    else:
        texts = _check_strings(file, payload.get("texts"), "texts", count, escaped)
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=count)
    metadata = payload.get("metadata")
    _rule(file, isinstance(metadata, list) and len(metadata) == count,
          f"metadata must be a list of {count} objects")
    if not all(isinstance(meta, dict) for meta in metadata):
        bad = next(i for i, meta in enumerate(metadata) if not isinstance(meta, dict))
        raise CorruptIndexError(f"{file}: metadata[{bad}] must be an object")
    encoded = []
    encode = _METADATA_JSON.encode
    for i, meta in enumerate(metadata):
        if not meta:  # most chunks carry none: the encoder's "{}" without calling it
            encoded.append("{}")
            continue
        try:
            encoded.append(encode(meta))
        except ValueError:
            raise CorruptIndexError(f"{file}: metadata[{i}] holds NaN or infinity") from None
    if escaped:
        _check_characters(file, encoded, "metadata")
    return ids, texts, encoded, lengths


NUL_SCAN_BLOCK = 1 << 26  # bytes of the texts searched for a NUL at a time


# texts decoded (and checked) at a time on load, then dropped: the state reads them again
# from the mapped bytes as they are used
CHECK_TEXTS_BLOCK = 1 << 16


def _read_texts(folder: Path, count: int) -> tuple[ChunkTexts, np.ndarray]:
    """The ``count`` texts of a version-5 save, as byte ranges of the mapped
    ``chunk_texts.npy``, and each text's length in characters.

    Every text is decoded once here, a block at a time: strict UTF-8 (so no lone
    surrogate), no NUL, not blank, each ending where ``chunk_text_ends`` says.
    """
    blob_file, ends_file = folder / "chunk_texts.npy", folder / "chunk_text_ends.npy"
    ends = _read_npy(ends_file, np.int64, (count,))
    blob = _read_npy(blob_file, np.uint8, (None,), mapped=True)
    starts = np.zeros(count, dtype=np.int64)
    starts[1:] = ends[:-1]
    _rule(ends_file, bool(np.all(ends > starts)) and (int(ends[-1]) if count else 0)
          == len(blob), f"must increase strictly to the {len(blob)} bytes of "
          "chunk_texts.npy: every text has at least one byte, and every byte is in a text")
    for block in range(0, len(blob), NUL_SCAN_BLOCK):  # bytes.find: memchr, in C
        nul = blob[block:block + NUL_SCAN_BLOCK].tobytes().find(b"\x00")
        if nul >= 0:
            which = int(np.searchsorted(ends, block + nul, side="right"))
            raise CorruptIndexError(f"{blob_file}: texts[{which}] contains a NUL character")
    view = blob.data
    lengths = np.empty(count, dtype=np.int64)
    for first in range(0, count, CHECK_TEXTS_BLOCK):
        runs = list(zip(starts[first:first + CHECK_TEXTS_BLOCK].tolist(),
                        ends[first:first + CHECK_TEXTS_BLOCK].tolist(), strict=True))
        try:  # a comprehension: 15 % faster than a loop that appends, at a million texts
            texts = [str(view[start:end], "utf-8") for start, end in runs]
        except UnicodeDecodeError:
            for i, (start, end) in enumerate(runs):  # which text: decoded again, one by one
                try:
                    str(view[start:end], "utf-8")
                except UnicodeDecodeError as exc:
                    raise CorruptIndexError(f"{blob_file}: texts[{first + i}] is not UTF-8 "
                                            f"({exc.reason} at byte {exc.start})") from None
            raise
        if not all(map(str.strip, texts)):
            blank = first + next(i for i, t in enumerate(texts) if not t.strip())
            raise CorruptIndexError(f"{blob_file}: texts[{blank}] must be a non-blank string")
        lengths[first:first + len(texts)] = np.fromiter(map(len, texts), dtype=np.int64,
                                                        count=len(texts))
    return ChunkTexts.of_bytes(blob, ends), lengths


def _save_bytes(fh: Any, runs: Iterator[np.ndarray], total: int) -> None:
    """An ``.npy`` of ``total`` bytes written run by run: the texts of a loaded index go
    from their mapped run to the new file without a copy on the heap."""
    _save_blocks(fh, runs, np.dtype(np.uint8), (total,), "bytes of texts")


def _save_rows(fh: Any, vectors: Rows, what: str = "sentence vectors") -> None:
    """Vectors (sentences', concepts') as float32 ``.npy``, or a graph's kept concept
    sums as int64, block by block when they are rows left in place (``state.rows``):
    never gathered whole on the heap."""
    held = held_rows(vectors)
    blocks = held.blocks() if isinstance(held, VectorRows) else iter([held])
    dtype = held.dtype if isinstance(held, VectorRows) else np.dtype(VECTOR_DTYPE)
    with sequential_reads(held):  # read-ahead, though queries may read the rows at random
        _save_blocks(fh, blocks, dtype, tuple(vectors.shape), what)


def _save_blocks(fh: Any, blocks: Iterator[np.ndarray], dtype: np.dtype, shape: tuple[int, ...],
                 what: str) -> None:
    """An ``.npy`` of ``shape`` written a block of its leading axis at a time."""
    np.lib.format.write_array_header_1_0(
        fh, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
             "shape": shape})
    written = 0
    for block in blocks:
        if block.size:  # a memoryview of an empty block cannot be cast
            fh.write(np.ascontiguousarray(block, dtype=dtype).data.cast("B"))
        written += len(block)
    if written != shape[0]:
        raise ValueError(f"wrote {written} {what}, expected {shape[0]}")


def _read_terms(file: Path, count: int, require_sorted: bool) -> list[str]:
    payload, escaped = _read_json(file)
    terms = _check_strings(file, payload, "terms", count, escaped)
    _check_unique_sorted(file, terms, "terms", require_sorted)
    return terms


def _read_npy(file: Path, dtype: type, shape: tuple[int | None, ...], *,
              mapped: bool = False) -> np.ndarray:
    """An array whose header is checked (dtype, order, shape, size) before its data is read.

    ``mapped`` maps the data read-only instead of reading it: pages come in as used.
    """
    try:
        with file.open("rb") as fh:
            major, _ = np.lib.format.read_magic(fh)
            if major == 1:
                header = np.lib.format.read_array_header_1_0(fh)
            elif major in (2, 3):
                header = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f"unknown .npy version {major}")
            got_shape, fortran, got_dtype = header
            data_start = fh.tell()
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise CorruptIndexError(f"{file} is unreadable: {exc}") from exc
    _rule(file, got_dtype == np.dtype(dtype) and not fortran,
          f"has dtype {got_dtype}, expected {np.dtype(dtype)} in C order")
    _rule(file, len(got_shape) == len(shape)
          and all(want is None or want == got for want, got in zip(shape, got_shape, strict=True)),
          f"has shape {got_shape}, expected {tuple('*' if s is None else s for s in shape)}")
    size = int(np.prod(got_shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    _rule(file, file.stat().st_size == data_start + size,
          f"holds {file.stat().st_size - data_start} bytes of data, its header says {size}")
    try:
        return np.load(file, allow_pickle=False, mmap_mode="r" if mapped else None)
    except (ValueError, OSError, EOFError) as exc:
        raise CorruptIndexError(f"{file} is unreadable: {exc}") from exc


def _increasing_within(indptr: np.ndarray, indices: np.ndarray) -> bool:
    """Whether ``indices`` increase strictly within each run ``indptr`` delimits (a
    canonical compressed matrix): a rise at every position that starts no run."""
    if len(indices) < 2:
        return True
    starts = np.zeros(len(indices), dtype=bool)
    starts[indptr[:-1][indptr[:-1] < len(indices)]] = True
    return bool(np.all((indices[1:] > indices[:-1]) | starts[1:]))


def _check_unit_rows(file: Path, vectors: np.ndarray) -> None:
    """Finite unit rows, checked a block at a time: no copy of a whole mapped file."""
    norms = finite_row_norms(vectors)
    if norms is None:
        raise CorruptIndexError(f"{file}: holds non-finite values (NaN or inf)")
    _rule(file, bool(np.all(np.abs(norms - 1.0) <= UNIT_NORM_TOLERANCE)),
          "holds vectors that are not of unit length")


def _read_vectors(file: Path, shape: tuple[int, int], version: int,
                  later: Later = _now) -> np.ndarray:
    """Embeddings: mapped as stored (version 3), or read and converted if need be (1, 2).
    ``later`` takes the unit-length check, to run beside the rest of the load
    (:meth:`_FileDigests.later`)."""
    if version >= 3:
        vectors = _read_npy(file, VECTOR_DTYPE, shape, mapped=True)
    else:
        vectors = _read_npy(file, _V2_VECTOR_DTYPE, shape)
    later(functools.partial(_check_unit_rows, file, vectors))
    return vectors if vectors.dtype == VECTOR_DTYPE else vectors.astype(VECTOR_DTYPE)


def _read_arrays(folder: Path, config: ConceptGraphConfig, dim: int, ids: list[str],
                 texts: Sequence[str], text_length: np.ndarray, metadata: list[str],
                 terms: list[str], n_sent: int,
                 version: int, counts_saved: bool, verify: bool,
                 later: Later = _now,
                 vectors_from: VectorRowsBackend | None = None) -> CorpusState:
    n, n_terms = len(ids), len(terms)

    def path(name: str) -> Path:
        return folder / f"{name}.npy"

    offsets = _read_npy(path("sentence_offsets"), np.int64, (n + 1,))
    _rule(path("sentence_offsets"), int(offsets[0]) == 0 and int(offsets[-1]) == n_sent,
          f"must run from 0 to the {n_sent} sentences")
    _rule(path("sentence_offsets"), bool(np.all(np.diff(offsets) > 0)),
          "must increase strictly: every chunk has at least one sentence")

    spans = _read_npy(path("sentence_spans"), np.int64, (n_sent, 2), mapped=True)
    chunk_of = np.repeat(np.arange(n), np.diff(offsets))
    starts, ends = spans[:, 0], spans[:, 1]
    _rule(path("sentence_spans"), bool(np.all((starts >= 0) & (starts < ends)
                                              & (ends <= text_length[chunk_of]))),
          "every span must be a non-empty range inside its chunk's text")
    same_chunk = chunk_of[1:] == chunk_of[:-1]
    _rule(path("sentence_spans"), bool(np.all(~same_chunk | (starts[1:] >= ends[:-1]))),
          "spans of one chunk must be in order and must not overlap")

    vectors: Rows = (
        _read_vectors(path("sentence_embeddings"), (n_sent, dim), version, later)
        if vectors_from is None else EngineRows(vectors_from, ids, texts, metadata, offsets,
                                                   dim))

    indptr = _read_npy(path("sentence_terms_indptr"), np.int64, (n_sent + 1,), mapped=True)
    _rule(path("sentence_terms_indptr"), int(indptr[0]) == 0
          and bool(np.all(np.diff(indptr) >= 0)), "must start at 0 and never decrease")
    nnz = int(indptr[-1])
    indices = _read_npy(path("sentence_terms_indices"), np.int64, (nnz,), mapped=True)
    data = _read_npy(path("sentence_terms_data"), np.int32, (nnz,), mapped=True)
    _rule(path("sentence_terms_indices"), bool(np.all((indices >= 0) & (indices < n_terms))),
          f"every term index must be in [0, {n_terms})")
    _rule(path("sentence_terms_indices"), _increasing_within(indptr, indices),
          "term indices must increase strictly within a sentence (sorted, no duplicates)")
    _rule(path("sentence_terms_data"), bool(np.all(data > 0)), "term counts must be positive")
    if version > 1:
        used = np.bincount(indices, minlength=n_terms) > 0
        _rule(folder / "terms.json", bool(used.all()), "lists a term that no sentence contains")
    matrix = csr_over(data, indices, indptr, (n_sent, n_terms))  # scipy would copy them

    unit_starts = _read_npy(path("unit_starts"), np.int64, (None,))
    wants_units = config.unit_tokens > 0 and n_sent > 0
    _rule(path("unit_starts"), (len(unit_starts) > 0) == wants_units,
          f"must {'' if wants_units else 'not '}list units (unit_tokens={config.unit_tokens})")
    if len(unit_starts):
        _rule(path("unit_starts"), bool(np.all(np.diff(unit_starts) > 0))
              and int(unit_starts[0]) == 0 and int(unit_starts[-1]) < n_sent,
              "must increase strictly from 0 within the sentences")
        _rule(path("unit_starts"), bool(np.isin(offsets[:-1], unit_starts).all()),
              "every chunk's first sentence must start a unit (units never span two chunks)")
    unit_vectors = None
    if config.chunk_similarity == "direct":
        n_units = len(unit_starts) if config.unit_tokens else n
        unit_vectors = _read_vectors(path("unit_vectors"), (n_units, dim), version, later)

    def recount() -> tuple[np.ndarray, np.ndarray]:
        decoded = list(texts)  # once: a unit's text is a slice of its chunk's
        units = (count_tokens_batch(unit_texts(decoded, spans, offsets, unit_starts))
                 if len(unit_starts) else np.zeros(0, dtype=np.int64))
        return count_tokens_batch(decoded), units

    if counts_saved:
        tokens = _read_npy(path("tokens"), np.int64, (n,))
        unit_tokens = _read_npy(path("unit_tokens"), np.int64, (len(unit_starts),))
        for name, read in (("tokens", tokens), ("unit_tokens", unit_tokens)):
            _rule(path(name), bool(np.all(read > 0)),
                  "token counts must be positive: every text has at least one token")
        if verify:
            for name, read, counted in zip(("tokens", "unit_tokens"), (tokens, unit_tokens),
                                           recount(), strict=True):
                wrong = np.flatnonzero(read != counted)
                _rule(path(name), not len(wrong),
                      f"{len(wrong)} counts differ from their texts' (the first at position "
                      f"{int(wrong[0]) if len(wrong) else -1})")
    else:
        tokens, unit_tokens = recount()
    try:
        return CorpusState(
            ids=tuple(ids), texts=texts if isinstance(texts, ChunkTexts) else tuple(texts),
            metadata=tuple(metadata),
            tokens=tokens,
            sentence_offsets=offsets, sentence_spans=spans, sentence_vectors=vectors,
            terms=tuple(terms), sentence_terms=matrix,
            unit_starts=unit_starts, unit_tokens=unit_tokens, unit_vectors=unit_vectors,
            tokens_read=counts_saved and not verify,
        )
    except ValueError as exc:  # every rule above should have caught it first
        raise CorruptIndexError(f"{folder}: {exc}") from exc
