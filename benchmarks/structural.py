"""GBNF grammars that hold a tiny local model to each prompt's format: structural runs only.

A 135M model cannot follow the KG or TERAG formats on its own, so a run meant to
check the harness's LLM plumbing end to end (calls, ledgers, stores, the fused
and TERAG methods) binds llama.cpp's sampler to the format with these
grammars (``--llm-structural``). What such a run measures is that every stage
runs and is accounted for, never quality: the names it extracts are whatever
the grammar lets through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Literal

from shared_core.answer.prompts import DECOMPOSE_SYSTEM, KEYS_SYSTEM, STEP_SYSTEM, VERIFY_SYSTEM
from shared_core.llm import Completion, Message, OpenAIChat, StreamPart

Purpose = Literal["answer", "kg", "terag_extract", "terag_query", "answer_pipeline"]

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
# the answer pipeline's prompts: a one- or two-lookup plan, a short step answer, a verdict
# either way, keys as JSON; its answer stays free text
PLAN = r'''
root ::= "1. retrieve: " lookup ("\n2. retrieve: " lookup)?
lookup ::= [A-Z] [a-z]{1,12} (" " [A-Za-z]{1,12}){2,10} "?"
'''
SHORT_ANSWER = r'root ::= [A-Z] [a-z]{1,12} (" " [A-Za-z0-9]{1,12}){0,3}'
VERDICT = r'root ::= ("SUPPORT" | "REJECT") " " [a-z]{2,10} (" " [a-z]{2,10}){0,4}'
KEYS = r'''
root ::= "{\"low_level_keywords\": [" key (", " key){0,2} "], \"high_level_keywords\": [" key "]}"
key ::= "\"" [A-Z] [a-z]{2,12} (" " [A-Za-z]{2,12}){0,2} "\""
'''
PIPELINE_GRAMMARS: dict[str, str] = {DECOMPOSE_SYSTEM: PLAN, STEP_SYSTEM: SHORT_ANSWER,
                                     VERIFY_SYSTEM: VERDICT, KEYS_SYSTEM: KEYS}

GRAMMARS: dict[Purpose, str | None] = {
    "answer": None,  # free text, cut at the answer's max_tokens
    "answer_pipeline": None,  # one grammar per prompt: GrammarByPrompt
    "kg": KG_RECORDS,
    "terag_extract": TERAG_PASSAGES,
    "terag_query": TERAG_QUERY,
}


class GrammarByPrompt:
    """One server, each request held to the grammar of its prompt (by the system message's
    start); prompts without one go free. Every call is a real request to llama.cpp."""

    def __init__(self, model: str, base_url: str | None, grammars: Mapping[str, str], *,
                 timeout: float = 120.0) -> None:
        self.model = model
        self.free = OpenAIChat(model, base_url=base_url, timeout=timeout)
        self.bound = [(start[:40], OpenAIChat(model, base_url=base_url, timeout=timeout,
                                              extra_body={"grammar": grammar}))
                      for start, grammar in grammars.items()]

    @property
    def model_name(self) -> str:
        return self.model

    def _chat(self, messages: Sequence[Message]) -> OpenAIChat:
        system = messages[0].content if messages else ""
        return next((chat for start, chat in self.bound if system.startswith(start)),
                    self.free)

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float = 0.0) -> Completion:
        return self._chat(messages).complete(messages, max_tokens=max_tokens,
                                             temperature=temperature)

    async def acomplete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                        temperature: float = 0.0) -> Completion:
        return await self._chat(messages).acomplete(messages, max_tokens=max_tokens,
                                                    temperature=temperature)

    def stream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
               temperature: float = 0.0) -> Iterator[StreamPart]:
        return self._chat(messages).stream(messages, max_tokens=max_tokens,
                                           temperature=temperature)

    def astream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                temperature: float = 0.0) -> AsyncIterator[StreamPart]:
        return self._chat(messages).astream(messages, max_tokens=max_tokens,
                                            temperature=temperature)
