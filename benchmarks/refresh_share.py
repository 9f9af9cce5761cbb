"""How much of the concept graph a 1 % add touches: why an exact refresh costs what it does.

    python -m benchmarks.refresh_share --passages 10000

Builds the scale benchmark's synthetic corpus, adds 1 % more passages, and counts the
concepts whose chunk column changed (they get new vectors) and the concept pairs passing
``theta_co`` that have one of them as an endpoint (each needs a new cosine).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from benchmarks.scale import DATA, passages, sentence_pool


def touched_share(n: int) -> dict[str, float]:
    from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
    from shared_core.graph import cooccurrence
    from shared_core.state import merge_many
    from shared_core.state.derived import link_concepts
    from shared_core.state.refresh import _concept_changes, chunk_moves

    pool = sentence_pool(DATA)
    ids, texts = passages(pool, n, seed=1)
    extra_ids, extra_texts = passages(pool, max(1, n // 100), seed=2)
    embedder, config = HashingEmbedder(384), ConceptGraphConfig(vector_index="exact")
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder, config=config)
    extra = ConceptGraphIndex.from_texts(extra_texts, ids=extra_ids, embedder=embedder,
                                         config=config)
    before = index.state.corpus
    after = merge_many([before, extra.state.corpus])
    found = link_concepts(after, config)
    changes = _concept_changes(index.state.graph, after, found, chunk_moves(before, after))
    pairs = sp.triu(cooccurrence(found.links), k=1).tocoo()
    strong = pairs.data >= config.theta_co
    changed = np.zeros(len(found.concept_terms), dtype=bool)
    changed[changes.changed] = True
    touched = strong & (changed[pairs.row] | changed[pairs.col])
    return {"passages": n, "added": len(extra_ids), "concepts": len(changed),
            "changed_concepts": int(changed.sum()), "pairs_passing_theta_co": int(strong.sum()),
            "pairs_touched": int(touched.sum()),
            "touched_share": round(float(touched.sum() / max(1, strong.sum())), 3)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=10_000)
    args = parser.parse_args(argv)
    print(json.dumps(touched_share(args.passages)))


if __name__ == "__main__":
    main()
