"""Faults injected into the index, and what survived them: the README's RELIABILITY table.

    python -m benchmarks.reliability --out benchmarks/results/reliability.json

Runs on the shipped sample corpus with the hashing embedder (no model, no data set):
- a failed add: an embedder that raises on its n-th call, for every call of an add,
  in three configs; the index must be unchanged and keep working;
- readers racing a writer: 4 threads query while one adds and deletes;
- kill -9 during save: a process saving two indexes in turn, killed at random;
- tampered files: every file of a saved index x every mutation, re-hashed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.faults import (
    FailOnCall,
    check_loaded,
    kill_during_saves,
    readers_and_writer,
    run_tamper_matrix,
    summary,
)
from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.corpus import read_corpus

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data" / "musique_sample"
CONFIGS = {
    "default": ConceptGraphConfig(),
    "units100+direct": ConceptGraphConfig(unit_tokens=100, chunk_similarity="direct"),
    "paper": ConceptGraphConfig.paper(),
}
QUERIES = ["Who founded the record label?", "When was the cathedral built?",
           "What river flows through the city?", "Which team won the cup?"]


def failed_adds(texts: list[str], ids: list[str]) -> dict[str, Any]:
    """For each config and each embed call of an add: fail it, check nothing changed."""
    injected = survived = 0
    half = len(texts) // 2
    for config in CONFIGS.values():
        probe = FailOnCall()
        ConceptGraphIndex.from_texts(texts[half:], ids=ids[half:], embedder=probe.embedder(),
                                     config=config)
        for call in range(1, probe.calls + 1):
            embedder = FailOnCall()
            index = ConceptGraphIndex.from_texts(texts[:half], ids=ids[:half],
                                                 embedder=embedder.embedder(), config=config)
            before = index.state
            answers = [[c.id for c in index.retrieve(q).chunks] for q in QUERIES]
            embedder.calls, embedder.fail_on = 0, call
            injected += 1
            raised = False
            try:
                index.add(texts[half:], ids=ids[half:])
            except TimeoutError:
                raised = True
            unchanged = raised and index.state is before and answers == [
                [c.id for c in index.retrieve(q).chunks] for q in QUERIES]
            embedder.fail_on = 0
            index.add(texts[half:], ids=ids[half:])
            survived += unchanged and len(index) == len(texts) and not check_loaded(
                index, QUERIES, 2000)
    return {"injected": injected, "survived": survived, "nothing_lost": survived}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    records = read_corpus(SAMPLE / "corpus.jsonl")
    texts, ids = [r.text for r in records], [r.id for r in records]
    started = time.perf_counter()
    report: dict[str, Any] = {"corpus": str(SAMPLE.relative_to(SAMPLE.parents[2])),
                              "chunks": len(texts)}

    report["failed_add"] = failed_adds(texts, ids)

    races = {}
    for name in ("default", "units100+direct"):
        index = ConceptGraphIndex.from_texts(texts[:250], ids=ids[:250],
                                             embedder=HashingEmbedder(), config=CONFIGS[name])
        race = readers_and_writer(index, texts[250:], QUERIES, readers=4,
                                  updates=args.updates, budget=1500, seconds=600)
        races[name] = {"queries": race.queries, "updates": race.updates,
                       "exceptions": len(race.errors), "over_budget": race.over_budget,
                       "unknown_ids": race.unknown_ids, "wrong_tokens": race.wrong_tokens}
    report["readers_vs_writer"] = races

    with tempfile.TemporaryDirectory() as tmp:
        kills = kill_during_saves(Path(tmp) / "idx", args.kills, n_chunks=1500, seed=7)
        report["kill_9"] = {
            "kills": len(kills),
            "loaded_whole": sum(k.loaded_chunks in (750, 1500) for k in kills),
            "errors": [k.error for k in kills if k.error],
            "kills_that_left_a_partial_version": sum(bool(k.leftovers) for k in kills),
        }
        tamper: dict[str, Any] = {}
        for name in ("default", "units100+direct"):
            saved = Path(tmp) / f"saved-{name}"
            ConceptGraphIndex.from_texts(texts, ids=ids, embedder=HashingEmbedder(),
                                         config=CONFIGS[name]).save(str(saved))
            outcomes = run_tamper_matrix(saved, HashingEmbedder(), Path(tmp), QUERIES, 1500)
            tamper[name] = {"counts": summary(outcomes),
                            "crashes": [o.__dict__ for o in outcomes if o.outcome == "crash"],
                            "loaded": [f"{o.file}: {o.mutation}" for o in outcomes
                                       if o.outcome == "loaded"],
                            "refused_at_use": [f"{o.file}: {o.mutation}" for o in outcomes
                                               if o.outcome == "refused at use"]}
        report["tamper"] = tamper
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
