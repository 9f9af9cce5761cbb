"""GBNF grammars that hold a tiny local model to each prompt's format: structural runs only.

A 135M model cannot follow the KG or TERAG formats on its own, so a run meant to
check the harness's LLM plumbing end to end (calls, ledgers, stores, the fused
and TERAG methods) binds llama.cpp's sampler to the format with these
grammars (``--llm-structural``). What such a run measures is that every stage
runs and is accounted for, never quality: the names it extracts are whatever
the grammar lets through.
"""

from __future__ import annotations

from typing import Literal

Purpose = Literal["answer", "kg", "terag_extract", "terag_query"]

_WORD = r'[A-Z] [a-z]{2,10}'
KG_RECORDS = rf'''
root ::= record ("##" record){{0,4}} "<|COMPLETE|>"
record ::= "(\"entity\"<|>" name "<|>" type "<|>" desc ")"
name ::= {_WORD} (" " {_WORD})?
type ::= "person" | "organization" | "location" | "event"
desc ::= [a-z]{{2,10}} (" " [a-z]{{2,10}}){{0,5}}
'''
TERAG_PASSAGES = rf'''
root ::= block ("\n\n" block){{0,4}}
block ::= "Passage " [1-5] ":\nENTITIES: " items "\nCONCEPTS: " items
items ::= item (", " item){{0,3}}
item ::= {_WORD} (" " {_WORD})?
'''
TERAG_QUERY = rf'''
root ::= "ENTITIES: " item (", " item){{0,2}}
item ::= {_WORD} (" " {_WORD})?
'''
GRAMMARS: dict[Purpose, str | None] = {
    "answer": None,  # free text, cut at the answer's max_tokens
    "kg": KG_RECORDS,
    "terag_extract": TERAG_PASSAGES,
    "terag_query": TERAG_QUERY,
}
