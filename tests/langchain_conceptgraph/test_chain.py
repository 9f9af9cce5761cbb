"""The retrievers inside an LCEL RAG chain, sync and async, end to end."""

from __future__ import annotations

from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnablePassthrough

from langchain_conceptgraph import ConceptGraphRetriever, CoreEmbeddings, FusedRetriever

from .conftest import CORPUS
from .fakes import RecordingChatModel
from .test_fused import static_kg

PROMPT = ChatPromptTemplate.from_template(
    "Answer from the context only.\n\nContext:\n{context}\n\nQuestion: {question}"
)


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(doc.page_content for doc in docs)


def rag_chain(retriever: BaseRetriever, llm: RecordingChatModel) -> Runnable[str, str]:
    return (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | PROMPT
        | llm
        | StrOutputParser()
    )


def test_concept_retriever_in_an_lcel_chain(
    documents: list[Document], embeddings: CoreEmbeddings
) -> None:
    retriever = ConceptGraphRetriever.from_documents(documents, embeddings, k=2)
    llm = RecordingChatModel(answer="Tim Berners-Lee")
    question = "Who invented the World Wide Web?"
    assert rag_chain(retriever, llm).invoke(question) == "Tim Berners-Lee"
    (prompt,) = llm.prompts
    assert f"Question: {question}" in prompt
    assert CORPUS["web"] in prompt  # the chunk that answers it reached the model
    context = prompt.split("Context:\n", 1)[1].split("\n\nQuestion:", 1)[0]
    assert context == format_docs(retriever.invoke(question))  # exactly k=2 chunks


async def test_fused_retriever_in_an_async_lcel_chain(
    documents: list[Document], embeddings: CoreEmbeddings
) -> None:
    concept = ConceptGraphRetriever.from_documents(documents, embeddings)
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=0.5,
                           budget=60)
    llm = RecordingChatModel(answer="Charles Babbage")
    question = "Who designed the Analytical Engine?"
    assert await rag_chain(fused, llm).ainvoke(question) == "Charles Babbage"
    (prompt,) = llm.prompts
    assert CORPUS["babbage"] in prompt
    assert "Tim Berners-Lee RELATED_TO CERN" in prompt  # a KG-path fact is in the context too
