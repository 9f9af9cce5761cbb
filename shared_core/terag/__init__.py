"""TERAG (Xiao et al. 2025): LLM-extracted concepts, a concept-passage graph, PPR retrieval.

- :func:`extract` / :func:`aextract`: named entities and document-level concepts
  of every passage, several passages per few-shot call (§4.1), as a
  :class:`TeragExtraction` (JSON round trip);
- :func:`concept_passage_graph`: the directed graph of ``has_passage`` and
  ``co_occurrence`` edges (§3.2, §4.2);
- :func:`select_seeds`, :func:`restart_vector`: the restart weights of Eq. 3-5;
- :func:`personalized_pagerank`: PPR by sparse power iteration;
- :class:`TeragRetriever`: query NER, seeds, PPR, passages into a token budget (§4.3);
- :func:`token_table`: the LLM tokens per stage, in the paper's form (Table 3).

The graph, seed and PPR pieces need no LLM: the benchmarks' TF-IDF comparator
(``benchmarks.comparators.terag``) uses them too.
"""

from .extract import (
    CONCEPT_TYPES,
    PASSAGES_PER_CALL,
    STAGE_CONCEPTS,
    STAGE_JOINT,
    STAGE_NER,
    STAGE_QUERY_NER,
    TERAG_STAGES,
    BatchParser,
    Concept,
    ConceptType,
    ExtractionFailure,
    ExtractionMode,
    TeragExtraction,
    TeragExtractionError,
    aextract,
    extract,
    extraction_messages,
    normalise_name,
    parse_batch_reply,
    parse_query_entities,
    query_messages,
)
from .graph import concept_passage_graph, passage_concept_links
from .ppr import (
    out_degree,
    passage_mass,
    personalized_pagerank,
    ranked_passages,
    transition_transpose,
)
from .retriever import TeragHit, TeragRetriever, TeragSearch, TokenRow, TokenTable, token_table
from .seeds import (
    Seed,
    SeedGroup,
    SeedMode,
    group_weights,
    restart_vector,
    select_seeds,
    strongest_seed,
)

__all__ = [
    "CONCEPT_TYPES",
    "PASSAGES_PER_CALL",
    "STAGE_CONCEPTS",
    "STAGE_JOINT",
    "STAGE_NER",
    "STAGE_QUERY_NER",
    "TERAG_STAGES",
    "BatchParser",
    "Concept",
    "ConceptType",
    "ExtractionFailure",
    "ExtractionMode",
    "Seed",
    "SeedGroup",
    "SeedMode",
    "TeragExtraction",
    "TeragExtractionError",
    "TeragHit",
    "TeragRetriever",
    "TeragSearch",
    "TokenRow",
    "TokenTable",
    "aextract",
    "concept_passage_graph",
    "extract",
    "extraction_messages",
    "group_weights",
    "normalise_name",
    "out_degree",
    "parse_batch_reply",
    "parse_query_entities",
    "passage_concept_links",
    "passage_mass",
    "personalized_pagerank",
    "query_messages",
    "ranked_passages",
    "restart_vector",
    "select_seeds",
    "strongest_seed",
    "token_table",
    "transition_transpose",
]
