"""What a selection keeps and what it saves: :class:`Selection` and its :class:`CostReport`.

The cost report is pure arithmetic on token counts, so it can be printed before
any LLM is called.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..config import SelectBy
from ..llm.pricing import DEFAULT_OUTPUT_RATIO, CostEstimate, ModelPrice, estimate_cost


@dataclass(frozen=True)
class CostReport:
    """What core-chunk selection saves on KG extraction, known before any LLM call.

    ``extraction_input_tokens`` estimates what the KG extractor will read: the
    kept chunk tokens plus ``prompt_tokens_per_chunk`` (the extractor's prompt
    template) for every kept chunk.

    ``graph_edges`` is the number of edges of the concept graph the ranking came
    from, ``None`` when unknown or when the ranking used no concept graph (KNN,
    random). Zero is worth a warning: without edges every concept has the same
    PageRank, so the ranking carries nothing the graph knows (issue #12).
    """

    kappa: float
    chunks_total: int
    chunks_kept: int
    tokens_total: int
    tokens_kept: int
    prompt_tokens_per_chunk: int = 0
    by: SelectBy = "chunks"
    graph_edges: int | None = None

    @property
    def chunks_dropped(self) -> int:
        return self.chunks_total - self.chunks_kept

    @property
    def tokens_dropped(self) -> int:
        return self.tokens_total - self.tokens_kept

    @property
    def exceeds_kappa(self) -> bool:
        """Whether more than ``kappa`` was kept: selection always keeps one chunk, however long."""
        kept, total = ((self.tokens_kept, self.tokens_total) if self.by == "tokens"
                       else (self.chunks_kept, self.chunks_total))
        return self.by == "tokens" and total > 0 and kept > self.kappa * total * (1 + 1e-12)

    @property
    def extraction_input_tokens(self) -> int:
        return self.tokens_kept + self.chunks_kept * self.prompt_tokens_per_chunk

    @property
    def extraction_input_tokens_all(self) -> int:
        return self.tokens_total + self.chunks_total * self.prompt_tokens_per_chunk

    @property
    def cost_reduction(self) -> float:
        """Share of KG-extraction input tokens saved against extracting every chunk."""
        full = self.extraction_input_tokens_all
        return 0.0 if full == 0 else 1.0 - self.extraction_input_tokens / full

    @property
    def warnings(self) -> tuple[str, ...]:
        """What makes this selection untrustworthy, each with the knob that fixes it."""
        if self.graph_edges == 0 and self.chunks_total > 1:
            return ("the concept graph has no edges, so every concept has the same PageRank "
                    "and the ranking uses no graph structure: lower theta_co, e.g. theta_co=1 "
                    "(index.reconfigured(theta_co=1), or conceptgraph build --set theta_co=1)",)
        return ()

    def extraction_estimate(self, model: str, *, all_chunks: bool = False,
                            output_ratio: float = DEFAULT_OUTPUT_RATIO,
                            prices: Mapping[str, ModelPrice] | None = None) -> CostEstimate:
        """What extracting a KG from the core chunks (or, ``all_chunks``, from every
        chunk) would cost with ``model``: one call per chunk reading the prompt and
        the chunk, and ``output_ratio`` output tokens per input token.
        """
        chunks, tokens = ((self.chunks_total, self.extraction_input_tokens_all) if all_chunks
                          else (self.chunks_kept, self.extraction_input_tokens))
        return estimate_cost("extract", model, calls=chunks, input_tokens=tokens,
                             output_ratio=output_ratio, prices=prices)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            chunks_dropped=self.chunks_dropped,
            tokens_dropped=self.tokens_dropped,
            extraction_input_tokens=self.extraction_input_tokens,
            extraction_input_tokens_all=self.extraction_input_tokens_all,
            cost_reduction=self.cost_reduction,
            exceeds_kappa=self.exceeds_kappa,
            warnings=list(self.warnings),
        )
        return out

    def summary(self) -> str:
        """A one-line human summary, for logs."""
        line = (
            f"core chunks at kappa={self.kappa:g} of {self.by}: "
            f"kept {self.chunks_kept}/{self.chunks_total} chunks, "
            f"{self.tokens_kept:,}/{self.tokens_total:,} tokens; KG-extraction input "
            f"~{self.extraction_input_tokens:,} tokens instead of "
            f"{self.extraction_input_tokens_all:,} ({self.cost_reduction:.1%} saved)"
        )
        if self.exceeds_kappa:
            line += (f"; over kappa: the best chunk alone is "
                     f"{self.tokens_kept / self.tokens_total:.1%} of the tokens, and at least "
                     "one chunk is always kept")
        for warning in self.warnings:
            line += f"; warning: {warning}"
        return line


@dataclass(frozen=True)
class Selection:
    """Kept chunk ids (in the index's canonical id order), their rank order, the cost report.

    ``scores`` are what was ranked: the chunk score, or that score per token when
    kappa is a share of tokens (``report.by``).
    """

    kept_ids: tuple[str, ...]
    dropped_ids: tuple[str, ...]
    ranked_ids: tuple[str, ...]
    scores: dict[str, float]
    report: CostReport
