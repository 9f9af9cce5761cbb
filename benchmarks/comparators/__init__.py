"""Retrieval methods the benchmarks compare conceptgraph against (not part of the library)."""

from .keyword import KeywordChannelRetriever, KeywordHit, KeywordSearch, keyword_channel
from .terag import (
    PprHit,
    PprSearch,
    Seed,
    SeedGroup,
    SeedMode,
    TeragPprRetriever,
    concept_passage_graph,
    out_degree,
    personalized_pagerank,
    terag_ppr,
    transition_transpose,
)
from .units import UnitRetriever, UnitRetrieverFactory, check_budget, check_query_vector

__all__ = [
    "KeywordChannelRetriever",
    "KeywordHit",
    "KeywordSearch",
    "PprHit",
    "PprSearch",
    "Seed",
    "SeedGroup",
    "SeedMode",
    "TeragPprRetriever",
    "UnitRetriever",
    "UnitRetrieverFactory",
    "check_budget",
    "check_query_vector",
    "concept_passage_graph",
    "keyword_channel",
    "out_degree",
    "personalized_pagerank",
    "terag_ppr",
    "transition_transpose",
]
