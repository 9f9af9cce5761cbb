"""TERAG's LLM extraction (§4.1): named entities and document-level concepts, in plain text.

The paper asks a small model (LLaMA-3.1-8B) for two kinds of concept with
few-shot prompts, and has it write the items directly instead of JSON, because
output tokens dominate the cost. Several passages go into one call; the reply
holds one block per passage::

    Passage 1:
    ENTITIES: Marie Curie, Paris, 1903
    CONCEPTS: Scientist Biography, Radioactivity Research

``mode="joint"`` (the default) asks for both kinds in one call per batch, as the
authors' released code does (one prompt, ``ENTITIES:`` and ``CONCEPTS:`` lines,
five passages per call) and as §5.3 describes ("in a single pass"): each passage
is read once. ``mode="separate"`` asks for each kind with its own prompt (two
calls per batch, stages ``ner`` and ``concepts``), for measuring the difference.

A reply that cannot be used is a :class:`~shared_core.llm.BadOutput`, so the
runner asks again: ``empty``/``refusal`` (from :func:`~shared_core.llm.reply_text`),
``unparsable`` (no passage block found), ``unknown_passage`` / ``duplicate_passage``
(a block numbered outside the batch, or twice: the model echoed the example),
``missing_passage`` (a passage of the batch without a complete block) and
``truncated`` (cut at ``max_tokens``). Complete blocks are kept across the
attempts of one batch; what is still missing after the last attempt is recorded
per passage in :attr:`TeragExtraction.failures` and logged, never dropped
silently. A run whose calls yield no concept at all raises
:class:`TeragExtractionError`, carrying what there is.

Names are normalised by :func:`normalise_name` and deduplicated by
(type, name), the paper's Eq. 2: the same name as an entity and as a concept is
two nodes.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from ..embeddings import check_texts
from ..llm import (
    BadOutput,
    Completion,
    LLMError,
    LLMRunner,
    Message,
    RequestFailed,
    reply_text,
    run_sync,
)

logger = logging.getLogger(__name__)

ConceptType = Literal["entity", "concept"]
CONCEPT_TYPES: tuple[ConceptType, ...] = ("entity", "concept")
ExtractionMode = Literal["joint", "separate"]

# Ledger stages: the rows of TERAG's token table (see retriever.token_table)
STAGE_JOINT = "ner_concepts"
STAGE_NER = "ner"
STAGE_CONCEPTS = "concepts"
STAGE_QUERY_NER = "query_ner"
TERAG_STAGES = (STAGE_JOINT, STAGE_NER, STAGE_CONCEPTS, STAGE_QUERY_NER)

PASSAGES_PER_CALL = 5  # the authors' code (optimized_batch_size); the paper gives no number
MAX_TOKENS_PER_PASSAGE = 256
QUERY_MAX_TOKENS = 100
MAX_NAME_CHARS = 100  # a longer "name" is a sentence the model copied, not a concept

FORMAT = "terag-extraction"
VERSION = 1

LABELS: dict[ConceptType, str] = {"entity": "ENTITIES", "concept": "CONCEPTS"}
_TYPE_OF_LABEL = {label: t for t, label in LABELS.items()}


@dataclass(frozen=True, order=True)
class Concept:
    """A concept node: its TERAG type and normalised name (the dedupe key, Eq. 2)."""

    type: ConceptType
    name: str


# ------------------------------------------------------------------ normalisation
_PLACEHOLDERS = frozenset({
    "none", "n/a", "na", "null", "nil", "nothing", "unknown", "not applicable", "empty",
    "no entities", "no concepts", "no named entities",
})
_LIST_MARKER = re.compile(r"^\s*(?:[-*•·]+|\d+[.)])\s+")
_EDGE_QUOTES = "\"'`“”‘’«»„*_ \t"
_TRAILING = ".,;:!?" + _EDGE_QUOTES
_LEADING = ",;:!?" + _EDGE_QUOTES


def normalise_name(raw: str) -> str | None:
    """The name as a node key, or None when it is no name at all.

    Unicode NFKC; a leading list marker (``-``, ``*``, ``•``, ``1.``, ``2)``) and
    surrounding quotes, markdown emphasis and sentence punctuation removed (a
    leading ``.`` stays: ``.NET``); whitespace runs collapsed to one space;
    case-folded. Dropped: names with no letter or digit, placeholders a model
    writes for "nothing" (``none``, ``n/a``, ``unknown`` ...) and names longer than
    ``MAX_NAME_CHARS``. Query entities go through the same function, so an exact
    match means equal keys.

    >>> normalise_name('  "Marie  Curie". ')
    'marie curie'
    >>> normalise_name("- Nobel Prize in Physics")
    'nobel prize in physics'
    >>> normalise_name("None") is None
    True
    """
    name = _LIST_MARKER.sub("", unicodedata.normalize("NFKC", raw))
    name = name.rstrip(_TRAILING).lstrip(_LEADING)
    name = " ".join(name.split()).casefold()
    if (not name or len(name) > MAX_NAME_CHARS or name in _PLACEHOLDERS
            or not any(ch.isalnum() for ch in name)):
        return None
    return name


def concepts_from(kind: ConceptType, items: Sequence[str]) -> list[Concept]:
    """Normalised concepts of one kind, first occurrence kept, unusable names dropped."""
    names = (normalise_name(item) for item in items)
    return [Concept(kind, n) for n in dict.fromkeys(n for n in names if n is not None)]


# ------------------------------------------------------------------------ prompts
_DEFINITIONS: dict[ConceptType, str] = {
    "entity": ("ENTITIES are named entities: proper names of specific, identifiable things "
               "such as people, organisations, places, nationalities, dates, events and "
               "titles of works, written as in the passage."),
    "concept": ("CONCEPTS are document-level concepts: two to four short, general phrases "
                "naming what the passage as a whole is about (its theme or category), not "
                "keywords copied from it."),
}
_WHAT: dict[ConceptType, str] = {"entity": "named entities",
                                 "concept": "document-level concepts"}

_EXAMPLES: tuple[tuple[str, dict[ConceptType, str]], ...] = (
    ("Marie Curie was a Polish-born physicist and chemist who worked in Paris. In 1903 she "
     "shared the Nobel Prize in Physics with Pierre Curie and Henri Becquerel for their "
     "research on radioactivity.",
     {"entity": "Marie Curie, Polish, Paris, 1903, Nobel Prize in Physics, Pierre Curie, "
                "Henri Becquerel",
      "concept": "Scientist Biography, Nobel Prize Laureate, Radioactivity Research"}),
    ("The Danube rises in the Black Forest of Germany and flows through Vienna and Budapest "
     "before it empties into the Black Sea.",
     {"entity": "Danube, Black Forest, Germany, Vienna, Budapest, Black Sea",
      "concept": "European River, Geography"}),
)


def _passages_block(texts: Sequence[str]) -> str:
    return "\n\n".join(f"=== Passage {i} ===\n{text}" for i, text in enumerate(texts, 1))


def _answer_block(number: int, fields: dict[ConceptType, str],
                  kinds: Sequence[ConceptType]) -> str:
    return "\n".join([f"Passage {number}:", *(f"{LABELS[k]}: {fields[k]}" for k in kinds)])


def extraction_messages(texts: Sequence[str],
                        kinds: Sequence[ConceptType] = CONCEPT_TYPES) -> list[Message]:
    """The few-shot prompt for one batch: definitions, a worked example, the passages.

    Our wording of the paper's design (§4.1): definitions of the wanted kinds, an
    example of two passages with the expected output, an instruction to write only
    the labelled lines, then the batch numbered from 1.
    """
    what = " and ".join(_WHAT[k] for k in kinds)
    labels = " and ".join(f'"{LABELS[k]}:"' for k in kinds)
    example_answer = "\n\n".join(_answer_block(i, fields, kinds)
                                 for i, (_, fields) in enumerate(_EXAMPLES, 1))
    user = "\n\n".join([
        f"Extract the {what} of every passage below.",
        "\n".join(f"- {_DEFINITIONS[k]}" for k in kinds),
        "Example input:\n" + _passages_block([text for text, _ in _EXAMPLES]),
        "Example output:\n" + example_answer,
        (f"Now answer for the {len(texts)} passage(s) below, in order. For each, write a "
         f'"Passage N:" line followed by the {labels} line(s). Separate items with commas '
         "and put no comma inside an item. When a passage has none, write the label with "
         "nothing after it. Write nothing else."),
        _passages_block(texts),
    ])
    system = (f"You read passages and list their {what}. You answer in the plain-text "
              "format shown, with nothing else.")
    return [Message("system", system), Message("user", user)]


_QUERY_EXAMPLES = (
    ("Who directed the film that won the Academy Award for Best Picture in 1998?",
     "Academy Award for Best Picture, 1998"),
    ("Which river flows through both Vienna and Budapest?", "Vienna, Budapest"),
)


def query_messages(query: str) -> list[Message]:
    """The few-shot query NER prompt (§4.3): the question's named entities on one line."""
    examples = "\n\n".join(f"Question: {q}\nENTITIES: {a}" for q, a in _QUERY_EXAMPLES)
    user = "\n\n".join([
        ("List the named entities in the question: proper names of specific people, "
         "organisations, places, dates, events and works, written as in the question. "
         "Separate them with commas; if there are none, write the label with nothing after it."),
        "Examples:\n" + examples,
        f"Question: {query}\nENTITIES:",
    ])
    system = "You find the named entities in a question. You answer with one ENTITIES: line."
    return [Message("system", system), Message("user", user)]


# ------------------------------------------------------------------------- parser
_HEADER = re.compile(r"^[\s#*=>_-]*passage\s*(\d+)\s*[=*#_]*\s*[:.)-]?\s*[=*#_]*\s*(.*)$",
                     re.IGNORECASE)
_FIELD = re.compile(r"^[\s#*>_-]*(entities|concepts)\s*[*_]*\s*:\s*[*_]*\s*(.*)$",
                    re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*•·]|\d+[.)])\s+")


def _items(text: str) -> list[str]:
    return [item for item in re.split(r"[,;]", text) if item.strip()]


def parse_batch_reply(text: str, n_passages: int,
                      kinds: Sequence[ConceptType] = CONCEPT_TYPES, *,
                      drop_last: bool = False) -> dict[int, tuple[Concept, ...]]:
    """The complete passage blocks of a reply, by 0-based position, in reply order.

    A block is complete when it has a line for every wanted label (an empty line is
    a passage with none). Items follow their label, or come as a bulleted list under
    it; other lines (chatter around the blocks) are ignored. With one passage, label lines
    without a ``Passage 1:`` header are accepted. ``drop_last`` leaves out the block
    written last (a reply cut at ``max_tokens`` may have cut it mid-list). Raises
    :class:`BadOutput` (``unparsable``, ``unknown_passage``, ``duplicate_passage``).
    """
    blocks: dict[int, dict[ConceptType, list[str]]] = {}
    current: dict[ConceptType, list[str]] | None = {} if n_passages == 1 else None
    if current is not None:
        blocks[0] = current
    field: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        header = _HEADER.match(line)
        if header:
            number = int(header.group(1))
            if not 1 <= number <= n_passages:
                raise BadOutput("unknown_passage",
                                f"passage {number} in a batch of {n_passages}")
            if number - 1 in blocks and (n_passages > 1 or blocks[0]):
                raise BadOutput("duplicate_passage", f"passage {number} appears twice")
            current = blocks[number - 1] = {}
            field = None
            line = header.group(2)
            if not line.strip():
                continue
        match = _FIELD.match(line)
        if match and current is not None:
            kind = _TYPE_OF_LABEL[match.group(1).upper()]
            field = current.setdefault(kind, [])
            field.extend(_items(match.group(2)))
        elif field is not None and _BULLET.match(line):
            field.extend(_items(line))  # a bulleted list under its label
        else:
            field = None
    if not any(blocks.values()):
        raise BadOutput("unparsable", f"no passage block in {text[:80]!r}")
    if drop_last:
        del blocks[list(blocks)[-1]]  # dicts keep the order the blocks were written in
    complete = {i: block for i, block in blocks.items() if all(k in block for k in kinds)}
    return {i: tuple(c for k in kinds for c in concepts_from(k, block[k]))
            for i, block in complete.items()}


class BatchParser:
    """``parse`` for one batch's calls: keeps every complete block across the attempts.

    The runner re-asks while a reply misses passages or is cut; :attr:`found` then
    holds what the attempts gave between them, so a batch that still fails keeps
    its good passages.
    """

    def __init__(self, n_passages: int, kinds: Sequence[ConceptType]) -> None:
        self.n_passages = n_passages
        self.kinds = tuple(kinds)
        self.found: dict[int, tuple[Concept, ...]] = {}

    def __call__(self, completion: Completion) -> dict[int, tuple[Concept, ...]]:
        blocks = parse_batch_reply(reply_text(completion), self.n_passages, self.kinds,
                                   drop_last=completion.truncated)
        if completion.truncated:
            self.found.update(blocks)
            raise BadOutput("truncated", f"reply cut at max_tokens after {len(blocks)} "
                            f"complete passage block(s) of {self.n_passages}")
        self.found.update(blocks)
        missing = [i + 1 for i in range(self.n_passages) if i not in self.found]
        if missing:
            raise BadOutput("missing_passage", f"no complete block for passage(s) {missing} "
                            f"of {self.n_passages}")
        return dict(self.found)


def parse_query_entities(completion: Completion) -> tuple[str, ...]:
    """The query's normalised entity names (possibly none) from a query NER reply."""
    text = reply_text(completion)
    if completion.truncated:
        raise BadOutput("truncated", "query NER reply cut at max_tokens")
    lines = [line for line in text.splitlines() if line.strip()]
    labelled = [m.group(2) for m in map(_FIELD.match, lines)
                if m and m.group(1).upper() == LABELS["entity"]]
    if labelled:
        items = [item for found in labelled for item in _items(found)]
    elif len(lines) == 1:  # the prompt ends with "ENTITIES:", so the bare list is fine
        items = _items(lines[0])
    else:
        raise BadOutput("unparsable", f"no ENTITIES: line in {text[:80]!r}")
    return tuple(c.name for c in concepts_from("entity", items))


# ---------------------------------------------------------------------- the result
@dataclass(frozen=True)
class ExtractionFailure:
    """A passage a stage found nothing for after every retry, and the last failure's kind."""

    passage_id: str
    stage: str
    kind: str


@dataclass(frozen=True)
class TeragExtraction:
    """Every passage's concepts (type, name), deduplicated; and what failed.

    Round-trips through JSON (:meth:`to_dict`, :meth:`from_dict`, :meth:`save`,
    :meth:`load`) with every field checked on the way in; never pickled.
    """

    passage_ids: tuple[str, ...]
    concepts: tuple[tuple[Concept, ...], ...]
    failures: tuple[ExtractionFailure, ...] = ()

    def __post_init__(self) -> None:
        if len(self.passage_ids) != len(self.concepts):
            raise ValueError(f"{len(self.passage_ids)} passage ids but "
                             f"{len(self.concepts)} concept lists")
        seen: set[str] = set()
        for i, pid in enumerate(self.passage_ids):
            if not isinstance(pid, str) or not pid:
                raise ValueError(f"passage_ids[{i}] must be a non-empty str, got {pid!r}")
            if pid in seen:
                raise ValueError(f"passage id {pid!r} appears twice")
            seen.add(pid)
        for pid, concepts in zip(self.passage_ids, self.concepts, strict=True):
            for c in concepts:
                if not isinstance(c, Concept) or c.type not in CONCEPT_TYPES:
                    raise ValueError(f"passage {pid!r}: {c!r} is not a typed Concept")
                if not isinstance(c.name, str) or normalise_name(c.name) != c.name:
                    raise ValueError(f"passage {pid!r}: concept name {c.name!r} is not "
                                     "normalised")
            if len(set(concepts)) != len(concepts):
                raise ValueError(f"passage {pid!r} lists a concept twice")
        for f in self.failures:
            if not isinstance(f, ExtractionFailure) or f.passage_id not in seen:
                raise ValueError(f"failure {f!r} names no passage of the extraction")
            if f.stage not in TERAG_STAGES or not isinstance(f.kind, str) or not f.kind:
                raise ValueError(f"failure {f!r}: unknown stage or empty kind")

    def __len__(self) -> int:
        return len(self.passage_ids)

    @property
    def n_concepts(self) -> int:
        """Distinct (type, name) nodes over all passages."""
        return len({c for concepts in self.concepts for c in concepts})

    def failure_counts(self) -> dict[str, int]:
        """Passages left without a stage's output, by failure kind."""
        return dict(Counter(f.kind for f in self.failures))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "passages": [{"id": pid, "concepts": [[c.type, c.name] for c in concepts]}
                         for pid, concepts in zip(self.passage_ids, self.concepts,
                                                  strict=True)],
            "failures": [{"passage_id": f.passage_id, "stage": f.stage, "kind": f.kind}
                         for f in self.failures],
        }

    @classmethod
    def from_dict(cls, data: object) -> TeragExtraction:
        """The extraction :meth:`to_dict` wrote; ``ValueError`` naming the bad field."""
        if not isinstance(data, dict):
            raise ValueError(f"a TERAG extraction must be a JSON object, got "
                             f"{type(data).__name__}")
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise ValueError(f"not a {FORMAT} v{VERSION} document: format "
                             f"{data.get('format')!r}, version {data.get('version')!r}")
        passages = _list(data.get("passages"), "passages")
        ids: list[str] = []
        concepts: list[tuple[Concept, ...]] = []
        for i, passage in enumerate(passages):
            if not isinstance(passage, dict) or set(passage) != {"id", "concepts"}:
                raise ValueError(f"passages[{i}] must be an object with id and concepts")
            ids.append(passage["id"])
            row = []
            for j, pair in enumerate(_list(passage["concepts"], f"passages[{i}].concepts")):
                if (not isinstance(pair, list) or len(pair) != 2
                        or pair[0] not in CONCEPT_TYPES or not isinstance(pair[1], str)):
                    raise ValueError(f"passages[{i}].concepts[{j}] must be [type, name] with "
                                     f"type in {CONCEPT_TYPES}, got {pair!r}")
                row.append(Concept(cast(ConceptType, pair[0]), pair[1]))
            concepts.append(tuple(row))
        failures = []
        for i, f in enumerate(_list(data.get("failures"), "failures")):
            if not isinstance(f, dict) or set(f) != {"passage_id", "stage", "kind"}:
                raise ValueError(f"failures[{i}] must be an object with passage_id, stage "
                                 "and kind")
            failures.append(ExtractionFailure(f["passage_id"], f["stage"], f["kind"]))
        return cls(tuple(ids), tuple(concepts), tuple(failures))

    def save(self, path: str | Path) -> None:
        """Atomic write, so a crash leaves the old file or the new one."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> TeragExtraction:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    return value


class TeragExtractionError(LLMError):
    """A run's calls yielded no concept at all; :attr:`partial` is what there is."""

    def __init__(self, message: str, partial: TeragExtraction) -> None:
        super().__init__(message)
        self.partial = partial


# ------------------------------------------------------------------------ the run
@dataclass(frozen=True)
class _Job:
    stage: str
    kinds: tuple[ConceptType, ...]
    passages: tuple[int, ...]


def _stages(mode: ExtractionMode) -> tuple[tuple[str, tuple[ConceptType, ...]], ...]:
    if mode == "joint":
        return ((STAGE_JOINT, CONCEPT_TYPES),)
    if mode == "separate":
        return ((STAGE_NER, ("entity",)), (STAGE_CONCEPTS, ("concept",)))
    raise ValueError(f"mode must be 'joint' or 'separate', got {mode!r}")


def _check_ids(passage_ids: object, n_texts: int) -> list[str]:
    if isinstance(passage_ids, (str, bytes)) or not isinstance(passage_ids, Sequence):
        raise TypeError("passage_ids must be a sequence of str")
    ids = list(passage_ids)
    if len(ids) != n_texts:
        raise ValueError(f"{len(ids)} passage ids but {n_texts} texts: the lengths differ")
    if any(not isinstance(i, str) or not i for i in ids) or len(set(ids)) != len(ids):
        raise ValueError("passage ids must be distinct non-empty strings")
    return ids


async def aextract(
    runner: LLMRunner,
    passage_ids: Sequence[str],
    passage_texts: Sequence[str],
    *,
    passages_per_call: int = PASSAGES_PER_CALL,
    mode: ExtractionMode = "joint",
    max_tokens_per_passage: int | None = MAX_TOKENS_PER_PASSAGE,
    resume: TeragExtraction | None = None,
    desc: str = "TERAG extraction",
) -> TeragExtraction:
    """TERAG's concepts for every passage: ceil(n / passages_per_call) calls per stage.

    Batches are consecutive passages in input order. ``max_tokens`` of a call is
    ``max_tokens_per_passage`` times its passage count (None: no cap). With
    ``resume``, passages it holds without a failure are reused, not asked again;
    passages with a recorded failure are asked again in every stage.
    """
    texts = check_texts(passage_texts, "passage_texts")
    ids = _check_ids(passage_ids, len(texts))
    if (isinstance(passages_per_call, bool) or not isinstance(passages_per_call, int)
            or passages_per_call < 1):
        raise ValueError(f"passages_per_call must be an int >= 1, got {passages_per_call!r}")
    if max_tokens_per_passage is not None and (
            isinstance(max_tokens_per_passage, bool)
            or not isinstance(max_tokens_per_passage, int) or max_tokens_per_passage < 1):
        raise ValueError(f"max_tokens_per_passage must be an int >= 1 or None, "
                         f"got {max_tokens_per_passage!r}")
    stages = _stages(mode)
    done: dict[str, tuple[Concept, ...]] = {}
    if resume is not None:
        failed = {f.passage_id for f in resume.failures}
        done = {pid: cs for pid, cs in zip(resume.passage_ids, resume.concepts, strict=True)
                if pid not in failed}
    todo = [i for i, pid in enumerate(ids) if pid not in done]
    jobs = [_Job(stage, kinds, tuple(todo[s:s + passages_per_call]))
            for stage, kinds in stages for s in range(0, len(todo), passages_per_call)]

    async def work(job: _Job) -> tuple[dict[int, tuple[Concept, ...]], str | None]:
        parse = BatchParser(len(job.passages), job.kinds)
        messages = extraction_messages([texts[p] for p in job.passages], job.kinds)
        cap = (None if max_tokens_per_passage is None
               else max_tokens_per_passage * len(job.passages))
        try:
            return await runner.acall(job.stage, messages, parse, max_tokens=cap), None
        except RequestFailed as failed:  # recorded per passage below, with its kind
            return parse.found, failed.kind

    outcomes = await runner.amap(jobs, work, desc=desc)
    found: dict[int, list[Concept]] = {i: [] for i in todo}
    failures: list[ExtractionFailure] = []
    for job, outcome in zip(jobs, outcomes, strict=True):
        assert outcome.value is not None  # work() returns every RequestFailed as a value
        blocks, kind = outcome.value
        for position, passage in enumerate(job.passages):
            if position in blocks:
                found[passage].extend(blocks[position])
            else:
                failures.append(ExtractionFailure(ids[passage], job.stage,
                                                  kind or "missing_passage"))
    concepts = tuple(tuple(found[i]) if i in found else done[pid] for i, pid in enumerate(ids))
    result = TeragExtraction(tuple(ids), concepts, tuple(failures))
    if failures:
        logger.warning("TERAG extraction: %d (passage, stage) pair(s) left without output "
                       "after retries (%s); they are listed in TeragExtraction.failures",
                       len(failures), ", ".join(f"{k} {n}" for k, n in
                                                sorted(result.failure_counts().items())))
    if jobs and not any(found.values()):
        raise TeragExtractionError(
            f"TERAG extraction: {len(jobs)} call(s) over {len(todo)} passage(s) yielded no "
            f"concept at all (failures: {result.failure_counts() or 'none'}); check the model "
            "and its replies (runner.ledger counts bad outputs by kind). What there is, "
            "including any resumed passages, is on .partial", result)
    return result


def extract(
    runner: LLMRunner,
    passage_ids: Sequence[str],
    passage_texts: Sequence[str],
    *,
    passages_per_call: int = PASSAGES_PER_CALL,
    mode: ExtractionMode = "joint",
    max_tokens_per_passage: int | None = MAX_TOKENS_PER_PASSAGE,
    resume: TeragExtraction | None = None,
    desc: str = "TERAG extraction",
) -> TeragExtraction:
    """:func:`aextract` from synchronous code."""
    return run_sync(aextract(runner, passage_ids, passage_texts,
                             passages_per_call=passages_per_call, mode=mode,
                             max_tokens_per_passage=max_tokens_per_passage, resume=resume,
                             desc=desc))
