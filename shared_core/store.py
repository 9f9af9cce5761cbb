"""Persistence of a ConceptGraphIndex as a versioned directory of JSON and ``.npy`` files.

Loading never runs code: arrays are read with ``allow_pickle=False``, JSON with
the standard parser, and every file is checked against the sha256 recorded in
``manifest.json``. Writes go to a temporary sibling directory that replaces the
target in one rename, so a crash never leaves half an index behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from .config import ConceptGraphConfig

if TYPE_CHECKING:
    from .embeddings import Embedder
    from .index import ConceptGraphIndex

FORMAT = "conceptgraph-index"
VERSION = 1
ARRAYS = {
    "tokens": (np.int64, 1),
    "sentence_spans": (np.int64, 2),
    "sentence_offsets": (np.int64, 1),
    "sentence_embeddings": (np.float32, 2),
    "sentence_terms_data": (np.int32, 1),
    "sentence_terms_indices": (np.int64, 1),
    "sentence_terms_indptr": (np.int64, 1),
    "unit_starts": (np.int64, 1),
    "unit_tokens": (np.int64, 1),
}
# written only for chunk_similarity="direct", so indexes saved before it existed still load
OPTIONAL_ARRAYS = {"unit_vectors": (np.float32, 2)}


class CorruptIndexError(ValueError):
    """The directory is not a readable conceptgraph index."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_index(index: ConceptGraphIndex, path: str | os.PathLike[str]) -> None:
    target = Path(path)
    foreign = target.exists() and not (target / "manifest.json").is_file()
    if foreign and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{target} exists and is not a conceptgraph index; not overwriting")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        terms = index._sentence_terms
        arrays = {
            "tokens": index._tokens,
            "sentence_spans": index._spans,
            "sentence_offsets": index._offsets,
            "sentence_embeddings": index._embeddings,
            "sentence_terms_data": terms.data.astype(np.int32),
            "sentence_terms_indices": terms.indices.astype(np.int64),
            "sentence_terms_indptr": terms.indptr.astype(np.int64),
            "unit_starts": index._unit_starts,
            "unit_tokens": index._unit_tokens,
        }
        if index.config.chunk_similarity == "direct":
            arrays["unit_vectors"] = index._unit_vectors
        kinds = {**ARRAYS, **OPTIONAL_ARRAYS}
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(array, dtype=kinds[name][0]),
                    allow_pickle=False)
        documents = {
            "chunks.json": {"ids": index._ids, "texts": index._texts, "metadata": index._metadata},
            "terms.json": list(index._vocabulary),
        }
        for name, payload in documents.items():
            (tmp / name).write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
        files = sorted(p.name for p in tmp.iterdir())
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "embedding_model": index.embedder.model_id,
            "embedding_dim": index.embedder.dim,
            "config": index.config.to_dict(),
            "chunks": len(index),
            "sentences": len(index._spans),
            "terms": len(index._vocabulary),
            "files": {name: _sha256(tmp / name) for name in files},
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        _swap_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_into_place(tmp: Path, target: Path) -> None:
    if not target.exists():
        os.replace(tmp, target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    root = Path(path)
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        raise CorruptIndexError(f"{root} has no manifest.json: not a conceptgraph index")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptIndexError(f"{manifest_path} is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorruptIndexError(f"{root} is not a conceptgraph index (bad manifest format)")
    if manifest.get("version") != VERSION:
        raise CorruptIndexError(
            f"{root} has index format version {manifest.get('version')!r}; "
            f"this conceptgraph reads version {VERSION}"
        )
    return manifest


def load_index(path: str | os.PathLike[str], embedder: Embedder) -> ConceptGraphIndex:
    from .index import ConceptGraphIndex

    root = Path(path)
    manifest = read_manifest(root)
    built_with = (manifest.get("embedding_model"), manifest.get("embedding_dim"))
    if built_with != (embedder.model_id, embedder.dim):
        raise ValueError(
            f"{root} was built with embedding model {manifest['embedding_model']!r} "
            f"(dim {manifest['embedding_dim']}), but the embedder given is "
            f"{embedder.model_id!r} (dim {embedder.dim}); query vectors would not be comparable"
        )
    expected = manifest.get("files")
    if not isinstance(expected, dict):
        raise CorruptIndexError(f"{root}/manifest.json lists no files")
    try:
        # indexes saved before select_by existed took kappa as a share of chunks
        config = ConceptGraphConfig.from_dict({"select_by": "chunks", **manifest["config"]})
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptIndexError(f"{root} has an unreadable config: {exc}") from exc
    kinds = dict(ARRAYS)
    if config.chunk_similarity == "direct":
        kinds.update(OPTIONAL_ARRAYS)
    needed = {f"{name}.npy" for name in kinds} | {"chunks.json", "terms.json"}
    missing = sorted(needed - set(expected))
    if missing:
        raise CorruptIndexError(f"{root}/manifest.json does not list {', '.join(missing)}")
    for name in needed:
        file = root / name
        if not file.is_file():
            raise CorruptIndexError(f"{root} is missing {name}")
        if _sha256(file) != expected[name]:
            raise CorruptIndexError(f"{file} does not match its checksum: the index is corrupt")

    arrays: dict[str, np.ndarray] = {}
    for name, (dtype, ndim) in kinds.items():
        try:
            array = np.load(root / f"{name}.npy", allow_pickle=False)
        except ValueError as exc:
            raise CorruptIndexError(f"{root}/{name}.npy is unreadable: {exc}") from exc
        if array.dtype != dtype or array.ndim != ndim:
            raise CorruptIndexError(f"{root}/{name}.npy has dtype {array.dtype}, ndim {array.ndim}")
        arrays[name] = array
    try:
        chunks = json.loads((root / "chunks.json").read_text(encoding="utf-8"))
        terms = json.loads((root / "terms.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptIndexError(f"{root} has unreadable JSON or config: {exc}") from exc

    n_chunks = len(chunks.get("ids", []))
    n_sent = len(arrays["sentence_spans"])
    consistent = (
        len(chunks.get("texts", [])) == n_chunks == len(chunks.get("metadata", []))
        == len(arrays["tokens"]) == manifest.get("chunks")
        and len(arrays["sentence_offsets"]) == n_chunks + 1
        and int(arrays["sentence_offsets"][-1]) == n_sent == manifest.get("sentences")
        and arrays["sentence_embeddings"].shape == (n_sent, embedder.dim)
        and len(arrays["sentence_terms_indptr"]) == n_sent + 1
        and len(terms) == manifest.get("terms")
        and len(arrays["unit_starts"]) == len(arrays["unit_tokens"])
        and (len(arrays["unit_starts"]) > 0) == (config.unit_tokens > 0 and n_sent > 0)
        and bool(np.all(np.diff(arrays["unit_starts"]) > 0))
        and bool(np.all((arrays["unit_starts"] >= 0) & (arrays["unit_starts"] < max(n_sent, 1))))
        and ("unit_vectors" not in arrays or arrays["unit_vectors"].shape == (
            len(arrays["unit_starts"]) if config.unit_tokens else n_chunks, embedder.dim))
    )
    if not consistent:
        raise CorruptIndexError(f"{root}: array and chunk counts disagree with each other")

    index = ConceptGraphIndex(embedder, config)
    index._ids = list(chunks["ids"])
    index._position = {cid: i for i, cid in enumerate(index._ids)}
    index._texts = list(chunks["texts"])
    index._metadata = [dict(m) for m in chunks["metadata"]]
    index._tokens = arrays["tokens"]
    index._spans = arrays["sentence_spans"]
    index._offsets = arrays["sentence_offsets"]
    index._embeddings = arrays["sentence_embeddings"]
    index._vocabulary = {term: i for i, term in enumerate(terms)}
    index._unit_starts = arrays["unit_starts"]
    index._unit_tokens = arrays["unit_tokens"]
    if "unit_vectors" in arrays:
        index._unit_vectors = arrays["unit_vectors"]
    try:
        index._sentence_terms = sp.csr_matrix(
            (arrays["sentence_terms_data"], arrays["sentence_terms_indices"],
             arrays["sentence_terms_indptr"]),
            shape=(n_sent, len(terms)),
        )
        index._sentence_terms.check_format(full_check=True)
    except ValueError as exc:
        raise CorruptIndexError(f"{root}: sentence-term matrix is malformed: {exc}") from exc
    index._refresh()
    return index
