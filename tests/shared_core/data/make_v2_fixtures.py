"""Writes the version-2 index fixtures (float32 embeddings) beside this file.

Run from a checkout of commit bb359b2 (the last one that saved version 2):
``PYTHONPATH=<that checkout> python tests/shared_core/data/make_v2_fixtures.py <this folder>``.
The chunks and configs are version 1's (``make_v1_fixtures.py``).
"""

import sys

from make_v1_fixtures import CONFIGS, IDS, META, TEXTS

from shared_core import ConceptGraphIndex, HashingEmbedder

if __name__ == "__main__":
    out = sys.argv[1]
    for name, cfg in CONFIGS.items():
        index = ConceptGraphIndex.from_texts(TEXTS, ids=IDS, metadatas=META,
                                             embedder=HashingEmbedder(64), config=cfg)
        index.save(f"{out}/{name.replace('v1_', 'v2_')}")
