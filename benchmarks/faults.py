"""Fault injection against a ConceptGraphIndex: tampered files, kill -9 during save,
readers racing a writer. The tests run each with a few cases; ``benchmarks.reliability``
runs them at scale and writes the table in RESULTS.md.

Every injector returns what happened to each fault, never a verdict it could
fudge: the caller checks that the outcome is a clear error or a correct index.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shared_core import ConceptGraphIndex, CorruptIndexError, FunctionEmbedder, HashingEmbedder
from shared_core.store import POINTER, bytes_digest, index_folder
from shared_core.text import count_tokens

Mutation = Callable[[Path], None]

# ------------------------------------------------------------------ a failing embedder
class FailOnCall:
    """The hashing embedder's function, raising on one chosen call (an API timing out).

    ``embedder()`` gives the core embedder over it; ``calls`` counts every call.
    """

    def __init__(self, fail_on: int = 0, dim: int = 256) -> None:
        self.inner = HashingEmbedder(dim)
        self.fail_on = fail_on
        self.calls = 0

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if self.calls == self.fail_on:
            raise TimeoutError("embedding API timed out (injected)")
        return self.inner.embed(texts)

    def embedder(self) -> FunctionEmbedder:
        return FunctionEmbedder(self, self.inner.model_id, self.inner.dim)


# ------------------------------------------------------------------ tampering
MUTATIONS = ("empty", "truncated", "duplicate entries", "wrong types", "negative values",
             "NaN values")


def rehash(folder: Path, name: str) -> None:
    """Record a file's new checksum in the manifest, as a deliberate editor would."""
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["files"][name] = bytes_digest((folder / name).read_bytes(), manifest)
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")


def swap_concept_vectors(folder: Path) -> None:
    """Swap two concept vectors (and their fixed-point sums, where the save keeps them)
    and re-hash: an edit every rule of a default load accepts (their values rest on the
    checksum), which a load with ``verify=True`` refuses."""
    file = folder / "concept_vectors.npy"
    vectors = np.load(file, allow_pickle=False)
    live = np.flatnonzero(np.abs(vectors).sum(axis=1) > 0)
    if len(live) < 2:
        raise ValueError(f"{file} holds fewer than two non-zero vectors to swap")
    first, second = int(live[0]), int(live[1])
    for name in ("concept_vectors.npy", "concept_sums.npy"):
        if not (folder / name).exists():
            continue
        rows = np.load(folder / name, allow_pickle=False)
        rows[[first, second]] = rows[[second, first]]
        np.save(folder / name, rows, allow_pickle=False)
        rehash(folder, name)


def _npy_mutation(kind: str) -> Mutation | None:
    def apply(file: Path) -> None:
        array = np.load(file, allow_pickle=False)
        if kind == "duplicate entries":
            if len(array) < 2:
                raise _NotApplicable
            array = array.copy()
            array[1] = array[0]
        elif kind == "wrong types":
            np.save(file, np.array([{"x": 1}] * max(len(array), 1), dtype=object),
                    allow_pickle=True)
            return
        elif kind == "negative values":
            if not array.size or array.dtype.kind == "u":  # bytes hold no negative value
                raise _NotApplicable
            array = array.copy()
            if array.dtype.kind == "f":
                array[0] = -np.abs(array[0]) - 1.0  # no longer a unit vector either
            else:  # as negative as the type holds, down to -1000 (int8: -128; bool: True)
                array.flat[0] = (-1000 if array.dtype.kind == "b"
                                 else max(-1000, int(np.iinfo(array.dtype).min)))
        elif kind == "NaN values":
            if array.dtype.kind != "f" or not array.size:
                raise _NotApplicable
            array = array.copy()
            array.flat[0] = np.nan
        np.save(file, array, allow_pickle=False)

    return apply


def _json_mutation(name: str, kind: str) -> Mutation:
    def apply(file: Path) -> None:
        payload = json.loads(file.read_text(encoding="utf-8"))
        if name == "chunks.json":  # texts: in chunks.json before version 5, then beside it
            target = payload["ids"] if kind != "wrong types" else payload.get(
                "texts", payload["metadata"])
        elif name == "terms.json":
            target = payload
        else:  # manifest.json
            target = None
        if kind == "duplicate entries":
            if target is None:  # a manifest whose counts repeat with another value
                text = file.read_text(encoding="utf-8").rstrip()[:-1]
                file.write_text(text + ', "chunks": 1}', encoding="utf-8")
                return
            if len(target) < 2:
                raise _NotApplicable
            target[1] = target[0]
        elif kind == "wrong types":
            if target is None:
                payload["config"]["top_k"] = "25"
            else:
                target[0] = 7
        elif kind == "negative values":
            if target is None:
                payload["sentences"] = -1
            elif name == "chunks.json":
                payload["metadata"][0] = -1
            else:
                target[0] = ""
        elif kind == "NaN values":
            if name == "chunks.json":
                payload["metadata"][0] = {"x": float("nan")}
            elif target is None:
                payload["embedding_dim"] = float("nan")
            else:
                raise _NotApplicable
        file.write_text(json.dumps(payload), encoding="utf-8")

    return apply


class _NotApplicable(Exception):
    """This mutation has no meaning for this file (e.g. NaN in an integer array)."""


def _not_applicable(file: Path) -> None:
    raise _NotApplicable


def _bytes_mutation(kind: str) -> Mutation | None:
    if kind == "empty":
        return lambda file: file.write_bytes(b"")
    if kind == "truncated":
        return lambda file: file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    return None


@dataclass(frozen=True)
class TamperOutcome:
    file: str
    mutation: str
    # "error" (refused by the load), "refused at use" (a saved token count that a
    # retrieval found wrong when it first returned the unit), "loaded", "not applicable",
    # "crash"
    outcome: str
    detail: str = ""


def tamper_cases(folder: Path) -> Iterator[tuple[str, str, Mutation]]:
    """Every (file, mutation) pair for the files of one saved version, plus the pointer."""
    for file in sorted(folder.iterdir()):
        for kind in MUTATIONS:
            mutation = _bytes_mutation(kind)
            if mutation is None and file.suffix == ".faiss":  # faiss's binary format
                mutation = _not_applicable
            elif mutation is None:
                mutation = (_npy_mutation(kind) if file.suffix == ".npy"
                            else _json_mutation(file.name, kind))
            yield file.name, kind, mutation
    yield POINTER, "points elsewhere", lambda f: f.write_text("../../etc\n")
    yield POINTER, "empty", lambda f: f.write_bytes(b"")


def check_loaded(index: ConceptGraphIndex, queries: list[str], budget: int) -> str:
    """'' when a loaded index answers soundly: within budget, true token counts, known ids."""
    for query in queries:
        result = index.retrieve(query, budget=budget)
        if result.tokens > budget:
            return f"{result.tokens} tokens over a budget of {budget}"
        for hit in result.chunks:
            if count_tokens(hit.text) != hit.chunk.tokens:
                return f"{hit.id} claims {hit.chunk.tokens} tokens, holds {count_tokens(hit.text)}"
            parent = hit.chunk.metadata.get("parent_chunk_id", hit.id)
            if parent not in index:
                return f"{parent} returned but not in the index"
    index.select(0.5)
    return ""


def run_tamper_matrix(saved: Path, embedder: HashingEmbedder, scratch: Path,
                      queries: list[str], budget: int = 60) -> list[TamperOutcome]:
    """Apply every mutation to a copy of ``saved`` (re-hashed) and load it once."""
    outcomes = []
    version = index_folder(saved).name
    for name, kind, mutation in list(tamper_cases(index_folder(saved))):
        copy = scratch / f"case-{len(outcomes)}"
        shutil.copytree(saved, copy)
        folder = copy if name == POINTER else copy / version
        try:
            mutation(folder / name)
        except _NotApplicable:
            outcomes.append(TamperOutcome(name, kind, "not applicable"))
            shutil.rmtree(copy)
            continue
        if name not in (POINTER, "manifest.json"):
            rehash(folder, name)
        try:
            loaded = ConceptGraphIndex.load(str(copy), embedder)
        except CorruptIndexError as exc:
            outcomes.append(TamperOutcome(name, kind, "error", str(exc)))
        except Exception as exc:  # anything else is a finding: reported, not swallowed
            outcomes.append(TamperOutcome(name, kind, "crash", f"{type(exc).__name__}: {exc}"))
        else:
            try:
                problem = check_loaded(loaded, queries, budget)
            except CorruptIndexError as exc:
                outcomes.append(TamperOutcome(name, kind, "refused at use", str(exc)))
            else:
                outcomes.append(TamperOutcome(name, kind, "crash" if problem else "loaded",
                                              problem))
        shutil.rmtree(copy)
    return outcomes


# ------------------------------------------------------------------ kill -9 during save
_SAVER = textwrap.dedent("""
    import sys
    from shared_core import ConceptGraphIndex, HashingEmbedder
    path, n = sys.argv[1], int(sys.argv[2])
    texts = [f"Chunk {i} tells of river {i % 37} and town {i % 11}. It has a second "
             f"sentence about bridge {i % 5}." for i in range(n)]
    big = ConceptGraphIndex.from_texts(texts, embedder=HashingEmbedder(256))
    small = ConceptGraphIndex.from_texts(texts[: n // 2], embedder=HashingEmbedder(256))
    big.save(path)
    print("ready", flush=True)
    while True:
        small.save(path)
        big.save(path)
""")


@dataclass
class KillOutcome:
    delay_s: float
    loaded_chunks: int | None
    error: str = ""
    leftovers: list[str] = field(default_factory=list)


def kill_during_saves(path: Path, kills: int, n_chunks: int = 1500, seed: int = 0,
                      max_delay_s: float = 0.6) -> list[KillOutcome]:
    """Start a process that saves two indexes to ``path`` in turn; SIGKILL it at random.

    After each kill the path is loaded: it must hold one of the two indexes whole.
    ``leftovers`` lists what the killed save left beside the current version.
    """
    rng = random.Random(seed)
    outcomes = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for _ in range(kills):
        child = subprocess.Popen([sys.executable, "-c", _SAVER, str(path), str(n_chunks)],
                                 stdout=subprocess.PIPE, env=env)
        assert child.stdout is not None
        if child.stdout.readline().strip() != b"ready":
            child.kill()
            raise RuntimeError("the saving process did not start")
        delay = rng.uniform(0, max_delay_s)
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        current = index_folder(path).name
        leftovers = sorted(p.name for p in path.iterdir()
                           if p.name not in (current, POINTER, ".lock"))
        try:
            loaded = ConceptGraphIndex.load(str(path), HashingEmbedder(256))
            outcomes.append(KillOutcome(delay, len(loaded), leftovers=leftovers))
        except Exception as exc:
            outcomes.append(KillOutcome(delay, None, f"{type(exc).__name__}: {exc}", leftovers))
    return outcomes


# ------------------------------------------------------------------ readers vs a writer
@dataclass
class RaceOutcome:
    queries: int = 0
    updates: int = 0
    errors: list[str] = field(default_factory=list)
    over_budget: int = 0
    unknown_ids: int = 0
    wrong_tokens: int = 0


def readers_and_writer(index: ConceptGraphIndex, extra_texts: list[str], queries: list[str],
                       *, readers: int = 4, updates: int = 40, budget: int = 80,
                       seconds: float = 30.0) -> RaceOutcome:
    """``readers`` threads query while one thread adds and deletes ``extra_texts`` in turn."""
    outcome = RaceOutcome()
    known = set(index.chunk_ids) | {f"x{i}" for i in range(len(extra_texts))}
    done = threading.Event()
    lock = threading.Lock()

    def read(seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set():
            try:
                result = index.retrieve(rng.choice(queries), budget=budget)
            except Exception as exc:
                with lock:
                    outcome.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            with lock:
                outcome.queries += 1
                outcome.over_budget += result.tokens > budget
                for hit in result.chunks:
                    parent = hit.chunk.metadata.get("parent_chunk_id", hit.id)
                    outcome.unknown_ids += parent not in known
                    outcome.wrong_tokens += count_tokens(hit.text) != hit.chunk.tokens

    def write() -> None:
        ids = [f"x{i}" for i in range(len(extra_texts))]
        deadline = time.monotonic() + seconds
        try:
            for step in range(updates):
                if time.monotonic() > deadline:
                    break
                if step % 2 == 0:
                    index.add(extra_texts, ids=ids)
                else:
                    index.delete(ids)
                with lock:
                    outcome.updates += 1
        except Exception as exc:
            with lock:
                outcome.errors.append(f"writer {type(exc).__name__}: {exc}")
        finally:
            done.set()

    threads = [threading.Thread(target=read, args=(i,)) for i in range(readers)]
    threads.append(threading.Thread(target=write))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcome


def summary(outcomes: list[Any]) -> dict[str, int]:
    """Counts of each outcome kind."""
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.outcome] = counts.get(o.outcome, 0) + 1
    return counts
