"""ConceptGraphConfig: paper defaults, range checks naming the knob, from_dict/to_dict."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import pytest

from shared_core.config import ConceptGraphConfig
from shared_core.search.walk import expansion_hops_for

# One bad value per knob (and a second where a knob has two ways to be wrong).
BAD_VALUES: list[tuple[str, Any]] = [
    ("theta_sem", 1.01),          # cosine threshold must be in [-1, 1]
    ("theta_sem", -1.5),
    ("theta_sem", "0.5"),         # not a number
    ("theta_sem", math.nan),      # NaN compares false to both bounds
    ("theta_co", 0),              # at least one shared chunk
    ("theta_co", 2.0),            # must be an int
    ("theta_co", True),           # a bool is not an int here
    ("kappa", 0.0),               # (0, 1]: keeping nothing is not a selection
    ("kappa", 1.2),
    ("kappa", math.nan),
    ("lam", -0.01),               # [0, 1]
    ("lam", 1.01),
    ("lam", math.nan),
    ("top_k", 0),                 # >= 1
    ("hops", -1),                 # "auto" or >= 0
    ("hops", 2.0),
    ("hops", "always"),
    ("budget", 0),                # >= 1
    ("budget", 10.5),
    ("concepts_per_chunk", 0),
    ("ngram_max", 0),
    ("min_term_chars", 0),
    ("cjk_segmenter", "mecab"),   # auto, jieba, bigram or none
    ("cjk_segmenter", None),
    ("concept_links", "all"),
    ("chunk_score", "median"),
    ("select_by", "words"),
    ("chunk_similarity", "min"),
    ("overflow", "truncate"),
    ("pagerank_weighted", 1),     # must be a real bool
    ("pagerank_damping", 1.0),    # [0, 1): damping 1 never converges
    ("pagerank_damping", -0.1),
    ("pagerank_damping", math.inf),
    ("unit_tokens", -1),          # 0 (whole chunks) or a positive unit size
    ("unit_tokens", 150.0),
    ("exact_match_seeds", 1),     # must be a real bool
    ("ranking", "bm25"),          # fused or paper
    ("lexical", "yes"),           # must be a real bool
    ("rrf_k", 0),                 # >= 1: 1/(0 + rank) would let rank 1 dominate
    ("rrf_k", 60.0),
    ("expansion_decay", 1.5),     # [0, 1]: an expanded concept never outweighs a direct one
    ("expansion_decay", math.nan),
    ("min_score", 1.5),           # a cosine floor: in [-1, 1], or None for no floor
    ("min_score", "0.3"),
    ("min_score", math.nan),
    ("vector_index", "faiss"),    # auto, exact or hnsw
    ("candidates", 0),            # at least one unit per view
    ("candidates", 100.0),
    ("entity_terms", "true"),     # must be a real bool
    ("walk_hops", -1),            # "auto", 0 (no walk view) or the concept -> unit steps
    ("walk_hops", 2.0),
    ("walk_hops", "always"),
    ("walk_nodes", "chunks"),     # sentences or units
    ("walk_seeds", "all"),        # direct or exact
    ("walk_postings", 0),         # None (read every posting) or at least one entry
    ("walk_postings", 1e5),
    ("concept_search", "ivf"),    # auto, exact, codes or hnsw
    ("concept_search", True),
    ("query_threads", 3),         # 1 or 2
    ("query_threads", 0),
    ("query_threads", True),      # a bool is not a thread count
    ("query_threads", "2"),
    ("rescore_from", "int8"),     # vectors or codes
]


def test_every_knob_has_a_bad_value_case() -> None:
    # A knob added to the config without a validation test fails here.
    assert {f.name for f in fields(ConceptGraphConfig)} == {k for k, _ in BAD_VALUES}


@pytest.mark.parametrize(("knob", "value"), BAD_VALUES)
def test_out_of_range_knob_raises_naming_it(knob: str, value: Any) -> None:
    with pytest.raises(ValueError, match=knob):
        ConceptGraphConfig(**{knob: value})


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("theta_sem", -1.0), ("theta_sem", 1.0), ("kappa", 1.0), ("kappa", 1e-6),
        ("lam", 0.0), ("lam", 1.0), ("hops", 0), ("top_k", 1), ("budget", 1),
        ("theta_co", 1), ("pagerank_damping", 0.0), ("theta_sem", 0),
        ("concept_links", "contains"), ("chunk_score", "mean"), ("chunk_similarity", "direct"),
        ("select_by", "tokens"),
        ("overflow", "skip"), ("pagerank_weighted", False), ("query_threads", 1),
        ("query_threads", 2), ("rescore_from", "vectors"), ("rescore_from", "codes"),
    ],
)
def test_boundary_values_are_accepted(knob: str, value: Any) -> None:
    cfg = ConceptGraphConfig(**{knob: value})
    assert getattr(cfg, knob) == value


def test_paper_defaults() -> None:
    # G2ConS Table 1 / §4.1 defaults as quoted in DESIGN.md
    cfg = ConceptGraphConfig()
    assert (cfg.theta_sem, cfg.theta_co, cfg.kappa, cfg.lam) == (0.65, 3, 0.8, 0.6)
    # hops: the paper's 2 wherever no walk runs (the walk replaces BFS where it does)
    assert (cfg.top_k, expansion_hops_for(cfg.hops, 0), cfg.budget) == (25, 2, 12000)
    assert cfg.hops == "auto" and expansion_hops_for(cfg.hops, 2) == 0
    assert expansion_hops_for(1, 2) == 1  # a number is taken as given


def test_measured_defaults_and_the_paper_search() -> None:
    # RESULTS.md: fused ranking and skip-on-overflow beat the paper's search on both sets
    cfg = ConceptGraphConfig()
    assert (cfg.ranking, cfg.overflow, cfg.rrf_k, cfg.expansion_decay) == ("fused", "skip", 10, 0.5)
    assert cfg.lexical and cfg.concept_links == "contains" and not cfg.exact_match_seeds
    paper = ConceptGraphConfig.paper(top_k=5)
    assert (paper.ranking, paper.overflow, paper.top_k) == ("paper", "stop", 5)
    with pytest.raises(ValueError, match="unknown config keys: topk"):
        ConceptGraphConfig.paper(topk=5)


def test_to_dict_from_dict_round_trip() -> None:
    cfg = ConceptGraphConfig(theta_sem=0.3, kappa=0.5, overflow="skip", pagerank_weighted=False)
    data = cfg.to_dict()
    assert data["theta_sem"] == 0.3 and data["overflow"] == "skip"
    assert set(data) == {f.name for f in fields(ConceptGraphConfig)}
    assert ConceptGraphConfig.from_dict(data) == cfg


def test_from_dict_rejects_unknown_keys_by_name() -> None:
    with pytest.raises(ValueError, match="unknown config keys: tehta_sem, topk"):
        ConceptGraphConfig.from_dict({"tehta_sem": 0.5, "topk": 3, "kappa": 0.5})


def test_from_dict_validates_values() -> None:
    with pytest.raises(ValueError, match="kappa"):
        ConceptGraphConfig.from_dict({"kappa": 2})


def test_config_is_frozen() -> None:
    cfg = ConceptGraphConfig()
    with pytest.raises(AttributeError):
        cfg.kappa = 0.5  # type: ignore[misc]


def test_knob_groups_partition_the_config() -> None:
    from shared_core.config import KNOB_GROUPS

    grouped = [k for group in KNOB_GROUPS.values() for k in group]
    assert len(grouped) == len(set(grouped))  # no knob in two groups
    assert set(grouped) == {f.name for f in fields(ConceptGraphConfig)}  # and none left out
    assert set(KNOB_GROUPS) == {"build", "graph", "selection", "query", "fusion"}
