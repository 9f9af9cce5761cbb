"""Our own core-KG extractor: GraphRAG-style records from an LLM, merged, stored, resumable.

- :func:`extract_kg` (and :func:`aextract_kg`, to await in a running event
  loop): chunks in, a :class:`KnowledgeGraph` out, every chunk persisted in a
  :class:`KGStore` as it lands (re-runs skip what is done; one writer at a time);
- :func:`estimate_extraction`: the cost before the first call;
- :func:`parse_extraction`: the tolerant reader of the model's records;
- the prompts (:mod:`.prompts`), with HuixiangDou2's loop-NER gleaning in its
  "base" and "trial" modes;
- :class:`KGRetriever`, :class:`FusedKGRetriever`: the KG path, alone or fused with
  the concept path, for users with no framework KG.
"""

from .extract import (
    EXTRACT_STAGE,
    GLEAN_STAGE,
    ExtractionConfig,
    ExtractionResult,
    ExtractionStopped,
    FailedChunk,
    aextract_kg,
    estimate_extraction,
    extract_chunk,
    extract_kg,
    extraction_usage,
)
from .graph import Entity, KnowledgeGraph, Mention, Relation
from .names import entity_key
from .parse import (
    EntityRecord,
    ParsedExtraction,
    RelationRecord,
    merge_extractions,
    parse_extraction,
    parse_yes_no,
)
from .prompts import (
    BASE_CONTINUE_PROMPT,
    COMPLETION_MARKER,
    CONTINUE_PROMPT,
    DEFAULT_ENTITY_TYPES,
    GLEANING_MODES,
    JUDGE_PROMPT,
    GleaningMode,
    extraction_messages,
    prompt_hash,
    prompt_tokens,
    system_prompt,
)
from .retrieve import EntityHit, FusedKGRetriever, KGRetriever
from .store import (
    ChunkRecord,
    KGStore,
    KGStoreError,
    KGStoreLocked,
    StoreManifest,
    text_hash,
)

__all__ = [
    "BASE_CONTINUE_PROMPT",
    "COMPLETION_MARKER",
    "CONTINUE_PROMPT",
    "DEFAULT_ENTITY_TYPES",
    "EXTRACT_STAGE",
    "GLEANING_MODES",
    "GLEAN_STAGE",
    "JUDGE_PROMPT",
    "ChunkRecord",
    "Entity",
    "EntityHit",
    "EntityRecord",
    "ExtractionConfig",
    "ExtractionResult",
    "ExtractionStopped",
    "FailedChunk",
    "FusedKGRetriever",
    "GleaningMode",
    "KGRetriever",
    "KGStore",
    "KGStoreError",
    "KGStoreLocked",
    "KnowledgeGraph",
    "Mention",
    "ParsedExtraction",
    "Relation",
    "RelationRecord",
    "StoreManifest",
    "aextract_kg",
    "entity_key",
    "estimate_extraction",
    "extract_chunk",
    "extract_kg",
    "extraction_messages",
    "extraction_usage",
    "merge_extractions",
    "parse_extraction",
    "parse_yes_no",
    "prompt_hash",
    "prompt_tokens",
    "system_prompt",
    "text_hash",
]
