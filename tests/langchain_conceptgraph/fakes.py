"""Test doubles: a KG extractor chat model counting its calls, a fixed KG, a callback recorder."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import (
    BaseCallbackHandler,
    CallbackManagerForLLMRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, PrivateAttr

# LLMGraphTransformer's default prompt ends with this, followed by the chunk text
INPUT_MARKER = "following input: "
NAME = re.compile(r"\b[A-Z][\w-]*(?: [A-Z][\w-]*)*")


def proper_names(text: str) -> list[str]:
    """Runs of capitalised words, in order, without repeats; a sentence-initial 'The' is dropped."""
    names = [m.group(0).removeprefix("The ").strip() for m in NAME.finditer(text)]
    return list(dict.fromkeys(n for n in names if n and n != "The"))


class FakeGraphExtractor(BaseChatModel):
    """Answers LLMGraphTransformer's structured-output call with one fact per name pair.

    The first proper name of a chunk is linked (``RELATED_TO``) to each later one.
    ``inputs`` records every chunk text the transformer sent, so a test can check
    exactly which chunks reached the "expensive" model.
    """

    inputs: list[str] = Field(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "fake-graph-extractor"

    @property
    def calls(self) -> int:
        return len(self.inputs)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        names = [convert_to_openai_tool(t)["function"]["name"] for t in tools]
        return self.bind(tool_name=names[0], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        prompt = str(messages[-1].content)
        if INPUT_MARKER not in prompt:
            raise AssertionError(f"unexpected prompt: {prompt[:200]!r}")
        text = prompt.split(INPUT_MARKER, 1)[1]
        with self._lock:
            self.inputs.append(text)
            n = len(self.inputs)
        names = proper_names(text)
        nodes = [{"id": name, "type": "Entity"} for name in names]
        relationships = [
            {"source_node_id": names[0], "source_node_type": "Entity",
             "target_node_id": other, "target_node_type": "Entity", "type": "RELATED_TO"}
            for other in names[1:]
        ]
        call = {"name": kwargs.get("tool_name", "DynamicGraph"),
                "args": {"nodes": nodes, "relationships": relationships},
                "id": f"call_{n}", "type": "tool_call"}
        message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


class StaticKG(BaseRetriever):
    """A KG retriever that always returns the same facts, in order."""

    facts: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return list(self.facts)


class RetrieverRunRecorder(BaseCallbackHandler):
    """Records every retriever run that starts or ends: (name, run id, parent run id)."""

    def __init__(self) -> None:
        self.starts: list[tuple[str, UUID, UUID | None]] = []
        self.ends: list[UUID] = []
        self._lock = threading.Lock()

    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self.starts.append((str(kwargs.get("name")), run_id, parent_run_id))

    def on_retriever_end(self, documents: Sequence[Document], *, run_id: UUID,
                         **kwargs: Any) -> None:
        with self._lock:
            self.ends.append(run_id)


class RecordingChatModel(BaseChatModel):
    """Returns a fixed answer and records the prompts it saw (for chain tests)."""

    answer: str = "I do not know."
    prompts: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recording-chat"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.prompts.append("\n".join(str(m.content) for m in messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.answer))])
