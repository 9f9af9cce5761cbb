"""Writes the version-1 index fixtures beside this file, with the code that wrote version 1.

Run from a checkout of commit 16b76ce (the last one that saved version 1):
``PYTHONPATH=<that checkout> python tests/shared_core/data/make_v1_fixtures.py <this folder>``.
"""

import json
import sys

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder

TEXTS = [
    "Ada Lovelace wrote the first computer program. She worked with Charles Babbage.",
    "Charles Babbage designed the analytical engine. The engine was mechanical.",
    "The analytical engine could run a program. Programs used punched cards.",
    "Punched cards came from the Jacquard loom. The loom wove silk patterns.",
    "Grace Hopper wrote the first compiler. The compiler translated programs.",
    "Alan Turing described a universal machine. The machine could compute anything.",
]
IDS = ["t5", "t1", "t3", "t0", "t4", "t2"]  # not sorted: version 1 kept insertion order
META = [{"n": i, "name": f"doc {i}", "ü": "ñ"} for i in range(len(TEXTS))]
BASE = {"theta_co": 1, "theta_sem": 0.0, "top_k": 3, "concepts_per_chunk": 3, "budget": 200}
CONFIGS = {
    "v1_default": ConceptGraphConfig(**BASE),
    "v1_units_direct": ConceptGraphConfig(**BASE, unit_tokens=12, chunk_similarity="direct"),
}

if __name__ == "__main__":
    out = sys.argv[1]
    for name, cfg in CONFIGS.items():
        index = ConceptGraphIndex.from_texts(TEXTS, ids=IDS, metadatas=META,
                                             embedder=HashingEmbedder(64), config=cfg)
        index.save(f"{out}/{name}")
    with open(f"{out}/v1_corpus.json", "w", encoding="utf-8") as fh:
        json.dump({"texts": TEXTS, "ids": IDS, "metadata": META, "configs": {
            k: v.to_dict() for k, v in CONFIGS.items()}}, fh, ensure_ascii=False, indent=1)
