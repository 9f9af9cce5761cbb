"""Every prompt of the answer pipeline, in one place, so each stage's wording is reviewable.

The formats asked for are the ones the parsers read (:mod:`.keys`,
:mod:`.logic_form`, :mod:`.verify`); each parser is tolerant of the usual
markup around them (code fences, bullets, bold).
"""

from __future__ import annotations

from .evidence import Evidence, context_block

KEYS_SYSTEM = """You extract search keys from a question, for retrieval from a knowledge graph.
Low-level keys: the specific entities, names, objects and concrete terms the question names.
High-level keys: its broader themes, topics and the relations it asks about.
Reply with one JSON object and nothing else:
{"low_level_keywords": ["...", "..."], "high_level_keywords": ["...", "..."]}"""

DECOMPOSE_SYSTEM = """You break a question into numbered steps, one per line: "N. operator: text".
Operators:
- retrieve: a simple question to look up, e.g. "1. retrieve: How tall is the Eiffel Tower?"
- filter: the items of an earlier list meeting a condition, e.g. "3. filter: {step2} | after 1900"
- count: how many items an earlier step listed, e.g. "4. count: {step3}"
- compare: a comparison of earlier numbers, e.g. "3. compare: {step1} > {step2}"
- compute: arithmetic on earlier numbers, e.g. "3. compute: {step1} - {step2}"
Write {stepN} for the answer of step N (only earlier steps). Use at most MAX steps.
Reply with the steps only."""

STEP_SYSTEM = """Answer the question from the context in as few words as possible (a name, a
number with its unit, a short list separated by commas). If the context does not say,
reply UNKNOWN."""

FILTER_SYSTEM = """From the items listed, keep only those that meet the condition, using the
context. Reply with the kept items separated by commas, exactly as written, or NONE."""

VERIFY_SYSTEM = """You check whether the evidence below is enough to answer the question,
before anyone answers it. Reply SUPPORT if it contains every fact the answer needs, or
REJECT if something is missing, then one short sentence saying why."""

ANSWER_LOGIC_SYSTEM = """Answer the question from the reasoning steps and the evidence. The
steps' results were looked up or computed exactly: use them as given. Be concise and say
how the steps lead to the answer."""

ANSWER_CONTEXT_SYSTEM = """Answer the question from the context. The context lists facts and
passages, each with where it came from. If the context does not contain the answer, say
so. Be concise."""


def decompose_system(max_steps: int) -> str:
    return DECOMPOSE_SYSTEM.replace("MAX", str(max_steps))


def question_with_context(query: str, evidence: list[Evidence], *,
                          history: str = "", heading: str = "Context") -> str:
    """The user turn: the question, the step history when there is one, the evidence."""
    parts = [f"Question: {query}"]
    if history:
        parts.append(f"Steps:\n{history}")
    parts.append(f"{heading}:\n{context_block(evidence) if evidence else '(none found)'}")
    return "\n\n".join(parts)
