"""The KG-extraction prompts: entities and relations as delimited records, plus gleaning.

The output format is GraphRAG's plain-text one, which small models follow more
reliably than JSON and which survives truncation record by record::

    ("entity"<|>NAME<|>TYPE<|>DESCRIPTION)##
    ("relationship"<|>SOURCE<|>TARGET<|>DESCRIPTION<|>STRENGTH)##
    ...
    <|COMPLETE|>

The wording and the worked example are our own. The instructions go in the system
message and the chunk's text, verbatim, is the whole user message: a call's
input is then exactly :func:`prompt_tokens` plus the chunk's own tokens (under
tiktoken counting), which is what makes :func:`~.extract.estimate_extraction`
exact before any output is paid.

Gleaning is HuixiangDou2's loop NER (its section 4.1 and Algorithm 2), in the
same conversation as the first reply, up to ``max_gleanings`` rounds, in one of
two modes (:data:`GLEANING_MODES`):

- ``"trial"``: ask first whether entities were missed (:data:`JUDGE_PROMPT`,
  answered YES or NO); only on YES ask for the missing records
  (:data:`CONTINUE_PROMPT`);
- ``"base"``: ask for more records first, telling the model some may be missing
  (:data:`BASE_CONTINUE_PROMPT`), then ask :data:`JUDGE_PROMPT`; stop on NO.

The paper's Table 3 has base ahead (21,838 nodes, 26,847 edges, accuracy 0.69
against trial's 20,739, 19,857, 0.61): a model asked "did you miss any?" tends
to say NO too soon, while one told to look again finds more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Literal

from ..llm.messages import Message
from ..llm.usage import TOKENS_PER_MESSAGE, TOKENS_PER_REPLY, message_tokens

TUPLE_DELIMITER = "<|>"
RECORD_DELIMITER = "##"
COMPLETION_MARKER = "<|COMPLETE|>"

# The default entity types: a small general set that covers encyclopaedic and news
# text. "work" is a creative or intellectual work (book, film, song, paper, law,
# product line); "concept" is the catch-all for ideas, fields, technologies,
# substances and diseases. Pass your own for a domain (e.g. ("gene", "protein", ...)).
DEFAULT_ENTITY_TYPES: tuple[str, ...] = (
    "person", "organization", "location", "event", "work", "date", "concept",
)


_SYSTEM = """\
You turn text into a knowledge graph. The next message is the text. Write down the \
entities it names and the relationships the text states between them.

Entities. Only entities of these types: {types}. For each one write
("entity"<|>NAME<|>TYPE<|>DESCRIPTION)
- NAME: the entity's name as the text writes it (its fullest form in the text);
- TYPE: one of the types above;
- DESCRIPTION: one sentence on what the text says about it.

Relationships. Only between entities you listed, and only when the text connects \
them. For each one write
("relationship"<|>SOURCE<|>TARGET<|>DESCRIPTION<|>STRENGTH)
- SOURCE and TARGET: the two entities' NAMEs, written exactly as in their entity records;
- DESCRIPTION: one sentence on how the text connects them;
- STRENGTH: a whole number from 1 (a loose link) to 10 (a very close one).

Rules. Entity records first, then relationship records. End every record with ## \
and a new line. Write only records: no numbering, no commentary, no markdown. Keep \
the names and descriptions in the language of the text. After the last record \
write <|COMPLETE|> on its own line.

An example (its types may differ from yours; use only the types listed above).
Text:
In 1928 the Scottish biologist Alexander Fleming saw a mould kill the bacteria in \
a dish in his laboratory at St Mary's Hospital, London. His observation led to penicillin.
Output:
("entity"<|>Alexander Fleming<|>person<|>Scottish biologist who saw a mould kill \
bacteria in 1928)##
("entity"<|>St Mary's Hospital<|>organization<|>London hospital where Fleming had \
his laboratory)##
("entity"<|>London<|>location<|>City where St Mary's Hospital stands)##
("entity"<|>penicillin<|>concept<|>Antibiotic that came out of Fleming's observation)##
("entity"<|>1928<|>date<|>Year of Fleming's observation)##
("relationship"<|>Alexander Fleming<|>St Mary's Hospital<|>Fleming worked in a \
laboratory at the hospital<|>8)##
("relationship"<|>St Mary's Hospital<|>London<|>The hospital is in London<|>6)##
("relationship"<|>Alexander Fleming<|>penicillin<|>Fleming's observation led to \
penicillin<|>9)##
("relationship"<|>Alexander Fleming<|>1928<|>Fleming made the observation in 1928<|>5)##
<|COMPLETE|>"""

JUDGE_PROMPT = (
    "Look at the text and your records again. Does the text name any entity of the "
    "listed types that your records leave out? Answer with one word: YES or NO."
)

CONTINUE_PROMPT = (
    "Write the records you left out now, in the same format: the missing entities, and "
    "the relationships that involve them. Do not repeat records you already wrote. "
    "End with <|COMPLETE|>."
)

# base mode's continue prompt: sent without a YES before it (the first round follows the
# first reply directly), so it says records *may* be missing and allows "nothing more"
BASE_CONTINUE_PROMPT = (
    "Some entities of the listed types may be missing from your records. Read the text "
    "again and write the records you left out, in the same format: the missing entities, "
    "and the relationships that involve them. Do not repeat records you already wrote. "
    "End with <|COMPLETE|>; if nothing is missing, write only <|COMPLETE|>."
)

GleaningMode = Literal["trial", "base"]
GLEANING_MODES: tuple[GleaningMode, ...] = ("trial", "base")


def check_entity_types(entity_types: Iterable[str]) -> tuple[str, ...]:
    """The types as the prompt and the store will use them: lower-case, unique, in order.

    A type may not hold the record syntax (it would break the format it is written in).
    """
    if isinstance(entity_types, str):
        raise TypeError("entity_types must be a sequence of str, not one str")
    out: list[str] = []
    for t in entity_types:
        if not isinstance(t, str):
            raise TypeError(f"entity types must be str, got {type(t).__name__}")
        name = " ".join(t.split()).casefold()
        if not name:
            raise ValueError("entity types must be non-empty")
        if any(s in name for s in (TUPLE_DELIMITER, RECORD_DELIMITER, "(", ")", ",")):
            raise ValueError(f"entity type {t!r} holds record syntax (<|>, ##, brackets "
                             "or a comma)")
        if name in out:
            raise ValueError(f"entity type {t!r} is given twice")
        out.append(name)
    if not out:
        raise ValueError("entity_types must name at least one type")
    return tuple(out)


def system_prompt(entity_types: Iterable[str] = DEFAULT_ENTITY_TYPES) -> str:
    """The extraction instructions and worked example, for these entity types."""
    return _SYSTEM.format(types=", ".join(check_entity_types(entity_types)))


def extraction_messages(text: str, entity_types: Iterable[str] = DEFAULT_ENTITY_TYPES,
                        ) -> list[Message]:
    """The first call's messages: the instructions, then the chunk's text verbatim."""
    return [Message("system", system_prompt(entity_types)), Message("user", text)]


def prompt_tokens(entity_types: Iterable[str] = DEFAULT_ENTITY_TYPES) -> int:
    """Input tokens of an extraction call beyond the chunk's own: the template's real size.

    Counted with :func:`~shared_core.text.count_tokens`, plus the chat overhead
    a server adds per message and for the reply, so that
    ``prompt_tokens(types) + count_tokens(text)`` is the call's input exactly.
    """
    return message_tokens(system_prompt(entity_types)) + TOKENS_PER_MESSAGE + TOKENS_PER_REPLY


def prompt_hash(entity_types: Iterable[str] = DEFAULT_ENTITY_TYPES,
                gleaning_mode: GleaningMode | None = None) -> str:
    """A short hash of every prompt a run sends, so a store can tell a changed prompt.

    ``gleaning_mode`` is the mode of a run that gleans, ``None`` for one that
    does not. ``None`` and ``"trial"`` hash the system, judge and trial-continue
    prompts, as every store did before the base mode existed, so those stores
    still resume; ``"base"`` adds :data:`BASE_CONTINUE_PROMPT`.
    """
    if gleaning_mode is not None and gleaning_mode not in GLEANING_MODES:
        raise ValueError(f"gleaning_mode must be one of {', '.join(map(repr, GLEANING_MODES))}"
                         f" or None, got {gleaning_mode!r}")
    parts = [system_prompt(entity_types), JUDGE_PROMPT, CONTINUE_PROMPT]
    if gleaning_mode == "base":
        parts.append(BASE_CONTINUE_PROMPT)
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]
