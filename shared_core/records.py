"""Framework objects as the core's chunk records, and the updates both adapters make.

An adapter only reads ``(id, text, metadata)`` off each LangChain document or
LlamaIndex node; what makes a batch valid, what a repeated object means and how
a delete treats ids the graph does not hold are decided here, once, so the two
frameworks cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .embeddings.base import check_texts
from .index import ConceptGraphIndex, content_id

T = TypeVar("T")

Entry = tuple[str | None, str, Mapping[str, Any]]


def record_id(given: str | None, text: str) -> str:
    """A chunk's id: the one the object carries, else the hash of its text (as the core does)."""
    return given if given else content_id(text)


def check_items(items: object, kind: Callable[..., T], what: str, kind_name: str) -> list[T]:
    """``items`` as a list of ``kind`` (a class); a bare item, a string or a non-sequence
    is refused.

    A single document passed where a list belongs would otherwise be iterated as
    its fields, so the error names what was passed, and the first wrong item.
    (``kind`` is typed as a callable so that an abstract base class is accepted.)
    """
    if not isinstance(kind, type):
        raise TypeError(f"kind must be a class, got {type(kind).__name__}")
    if isinstance(items, (str, bytes, kind)) or not isinstance(items, Sequence):
        raise TypeError(f"{what} must be a sequence of {kind_name}, got {type(items).__name__}")
    out = list(items)
    for i, item in enumerate(out):
        if not isinstance(item, kind):
            raise TypeError(f"{what}[{i}] must be a {kind_name}, got {type(item).__name__}")
    return out


@dataclass(frozen=True)
class ChunkRecords:
    """The distinct chunks of a batch (first occurrence order) and every input's chunk id.

    ``input_ids[i]`` is the chunk the ``i``-th object became, so an adapter maps a
    selection back to its own objects without recomputing ids.
    """

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    metadatas: tuple[dict[str, Any], ...]
    input_ids: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.ids)


def chunk_records(entries: Iterable[Entry], what: str = "documents") -> ChunkRecords:
    """One record per distinct chunk of ``entries`` (``(id or None, text, metadata)``).

    The rule for a repeated id is :meth:`ConceptGraphIndex.add`'s: the same id with
    the same text and metadata is one chunk (a document passed twice); the same id
    with different text, or different metadata, raises ``ValueError`` naming both
    positions, since one of the two would otherwise be silently lost. Blank text
    raises, naming its position.
    """
    rows = list(entries)
    check_texts([text for _, text, _ in rows], what)
    ids: list[str] = []
    texts: list[str] = []
    metadatas: list[dict[str, Any]] = []
    input_ids: list[str] = []
    first: dict[str, int] = {}  # chunk id -> input position of its first occurrence
    for i, (given, text, metadata) in enumerate(rows):
        if not isinstance(metadata, Mapping):
            raise TypeError(f"{what}[{i}] metadata must be a mapping, "
                            f"got {type(metadata).__name__}")
        cid = record_id(given, text)
        input_ids.append(cid)
        seen = first.get(cid)
        if seen is None:
            first[cid] = i
            ids.append(cid)
            texts.append(text)
            metadatas.append(dict(metadata))
            continue
        _, seen_text, seen_metadata = rows[seen]
        if seen_text != text:
            raise ValueError(f"{what}[{seen}] and {what}[{i}] share id {cid!r} but differ in "
                             "text: give each chunk its own id")
        if dict(seen_metadata) != dict(metadata):
            raise ValueError(f"{what}[{seen}] and {what}[{i}] are the same chunk (id {cid!r}) "
                             "with different metadata: keep one of them")
    return ChunkRecords(tuple(ids), tuple(texts), tuple(metadatas), tuple(input_ids))


def add_records(index: ConceptGraphIndex, records: ChunkRecords, *,
                show_progress: bool = False) -> list[str]:
    """Add the records to ``index`` (all or nothing); returns the chunk id of every input.

    A chunk already held with the same text is not embedded again and takes the
    new metadata; one held with different text raises (delete it first).
    """
    index.add(list(records.texts), ids=list(records.ids), metadatas=list(records.metadatas),
              show_progress=show_progress)
    return list(records.input_ids)


def check_ids(ids: object, what: str = "ids") -> list[str]:
    """Chunk ids to delete, in the order given, without repeats."""
    if ids is None:
        raise ValueError(f"{what} is None: pass the ids to delete (deleting everything "
                         "is not supported; build a new retriever instead)")
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"{what} must be an iterable of str, not {type(ids).__name__}")
    items = list(ids)
    for i, cid in enumerate(items):
        if not isinstance(cid, str):
            raise TypeError(f"{what}[{i}] must be a str id, got {type(cid).__name__}")
    return list(dict.fromkeys(items))


def delete_chunks(index: ConceptGraphIndex, ids: object, what: str = "ids") -> list[str]:
    """Delete the chunks among ``ids`` that ``index`` holds; returns those, in the order given.

    Ids the index does not hold are skipped, as the frameworks' vector stores skip
    them (deleting twice is not an error). The index itself refuses unknown ids,
    so they are filtered first, against one state; should another thread delete
    one of them in between, the filter is simply redone.
    """
    wanted = check_ids(ids, what)
    while True:
        held = index.state.corpus.position
        present = [cid for cid in wanted if cid in held]
        try:
            index.delete(present)
        except KeyError:
            continue  # deleted meanwhile by another writer: filter against the new state
        return present


def chunk_ids_where(index: ConceptGraphIndex, key: str, value: object) -> list[str]:
    """The chunks whose metadata holds ``key: value``, in the index's id order."""
    corpus = index.state.corpus
    return [cid for pos, cid in enumerate(corpus.ids) if corpus.metadata_of(pos).get(key) == value]


def delete_where(index: ConceptGraphIndex, key: str, value: object) -> list[str]:
    """Delete every chunk whose metadata holds ``key: value`` (e.g. one source document's)."""
    return delete_chunks(index, chunk_ids_where(index, key, value))
