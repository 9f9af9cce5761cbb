"""Selection experiment (graph views, round one): coverage orders against concept PageRank,
KNN and random, answers kept at each kappa (a share of tokens).

    PYTHONPATH=. python benchmarks/results/archive/graph_views_round1/selection_experiment.py \
        musique chunk1200
"""

import json
import sys

import numpy as np

from benchmarks.coverage import (
    KAPPAS,
    answer_chunks,
    coverage_of,
    kept_mask,
    ketrag_selector,
    random_spread,
)
from benchmarks.data import DATA_ROOT, corpus_for, load_dataset
from benchmarks.metrics import normalize_answer
from benchmarks.run import resolve_embedder
from shared_core.graph.concepts import smoothed_idf
from shared_core.index import ConceptGraphIndex
from shared_core.select import select_by_scores
from shared_core.select.coverage import coverage_order, order_scores

name, protocol = sys.argv[1], sys.argv[2]
ds = load_dataset(DATA_ROOT / name)
corpus = corpus_for(ds, protocol)
emb = resolve_embedder("minilm", "benchmarks/cache/embeddings.sqlite")
hits = answer_chunks(ds.questions, [normalize_answer(t) for t in corpus.chunks.texts])
index = ConceptGraphIndex(emb)
index.add(corpus.chunks.texts, ids=corpus.chunks.ids)
g = index.state.graph
tokens = corpus.chunks.tokens
# index chunk order may differ from corpus order: map
pos = index.state.corpus.position
perm = np.array([pos[c] for c in corpus.chunks.ids])
links = g.links[perm]
itok = np.asarray(tokens)
rank = g.rank
df = np.diff(g.links_csc.indptr).astype(float)
idf = smoothed_idf(len(perm), df)
def sel(scores):
    return lambda k: select_by_scores(corpus.chunks.ids, scores, tokens, k, by="tokens")
selectors = {
    "g2cons": lambda k: index.select(k, by="tokens"),
    "coverage": lambda k: index.select(k, by="tokens", method="coverage"),
    "cov_idf": sel(order_scores(coverage_order(links, idf, itok))),
}
try:
    selectors["ketrag_knn"] = ketrag_selector(corpus, emb, "tokens")
except ImportError as e:
    print("knn unavailable", e)
out = {}
for n, s in selectors.items():
    out[n] = {}
    for k in KAPPAS:
        kept = coverage_of(kept_mask(corpus, s(k)), corpus, ds.questions, hits)
        out[n][f"{k:g}"] = round(100 * kept["answer"], 1)
rs = random_spread(corpus, ds.questions, hits, KAPPAS, 0, by="tokens")
out["random"] = {k: f"{100*v['answer']:.1f}±{100*v['answer_sd']:.1f}" for k, v in rs.items()}
print(name, protocol, json.dumps(out))
