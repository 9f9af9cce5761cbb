"""Text: tokens and token windows, sentences, hygiene checks, terms (CJK included), units."""

from .hygiene import check_query, invalid_character
from .sentences import concatenated_ranges, segment_matrix, split_sentences
from .terms import (
    CJK_SEGMENTERS,
    Analyzer,
    ResolvedCjkSegmenter,
    count_terms,
    resolve_cjk_segmenter,
    term_analyzer,
)
from .tokens import (
    ENCODING_NAME,
    chunk_by_tokens,
    count_tokens,
    count_tokens_batch,
    static_data_dir,
)
from .units import Units, pack_sentences, packed_runs, split_into_units

__all__ = [
    "CJK_SEGMENTERS",
    "ENCODING_NAME",
    "Analyzer",
    "ResolvedCjkSegmenter",
    "Units",
    "check_query",
    "chunk_by_tokens",
    "concatenated_ranges",
    "count_terms",
    "count_tokens",
    "count_tokens_batch",
    "invalid_character",
    "pack_sentences",
    "packed_runs",
    "resolve_cjk_segmenter",
    "segment_matrix",
    "split_into_units",
    "split_sentences",
    "static_data_dir",
    "term_analyzer",
]
