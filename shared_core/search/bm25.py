"""Okapi BM25 over the retrieval units, from the term counts the index already keeps.

The fused ranking's third view: small embedders blur the names and numbers a
question turns on, exact word overlap keeps them. No second tokenizer and no
second pass over the text: the units' counts of the concept analyzer's terms
(lowercased words without English stop words) are all it needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .candidates import PositiveView, RescoredView
from .postings import postings_view
from .sparse_values import distinct_sorted


def lucene_idf(df: np.ndarray, n_units: int) -> np.ndarray:
    """Lucene's idf, ``ln(1 + (n - df + 0.5) / (df + 0.5))``: never negative."""
    return np.asarray(np.log1p((n_units - df + 0.5) / (df + 0.5)), dtype=np.float64)


def term_columns(term_ids: Iterable[int]) -> np.ndarray:
    """A query's distinct term ids, ascending: the weight columns it reads."""
    return distinct_sorted(np.fromiter(term_ids, dtype=np.int64))


@dataclass(frozen=True)
class BM25Scorer:
    """Per-term BM25 weights of every unit, precomputed; a query sums its terms' columns."""

    weights: sp.csc_matrix  # units x terms: idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))

    @classmethod
    def from_counts(cls, unit_terms: sp.spmatrix, k1: float = 1.5, b: float = 0.75) -> BM25Scorer:
        """Lucene's BM25: idf = ln(1 + (n - df + 0.5) / (df + 0.5)), never negative."""
        counts = sp.csr_matrix(unit_terms, dtype=np.float64)
        n_units = counts.shape[0]
        lengths = np.asarray(counts.sum(axis=1)).ravel()
        mean_length = lengths.mean() if n_units and lengths.mean() > 0 else 1.0
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        idf = lucene_idf(df, n_units)
        norm = k1 * (1 - b + b * lengths / mean_length)
        # idf * tf / (tf + norm) per entry, in place: one float64 array per entry held at a
        # time besides the counts (each 415 MB at a million passages), the same bits
        denominator = np.repeat(norm, np.diff(counts.indptr))
        denominator += counts.data
        data = idf[counts.indices]
        data *= counts.data
        data /= denominator
        del denominator
        weights = sp.csr_matrix((data, counts.indices, counts.indptr), shape=counts.shape)
        del counts  # its float64 counts: the CSC copy below is the last allocation
        return cls(weights.tocsc())

    def scores(self, term_ids: Iterable[int]) -> np.ndarray:
        """BM25 of every unit for a query given as term ids (each distinct term once)."""
        columns = term_columns(term_ids)
        if not len(columns):
            return np.zeros(self.weights.shape[0], dtype=np.float64)
        return np.asarray(self.weights[:, columns].sum(axis=1), dtype=np.float64).ravel()

    def entries(self, term_ids: Iterable[int]) -> int:
        """How many posting entries :meth:`view` reads for these terms."""
        columns = term_columns(term_ids)
        return int((self.weights.indptr[columns + 1] - self.weights.indptr[columns]).sum())

    def idf(self, columns: np.ndarray) -> np.ndarray:
        """Lucene's idf of these terms over the units (what ``from_counts`` weighted by)."""
        return lucene_idf(np.diff(self.weights.indptr)[columns], self.weights.shape[0])

    def unit_scores(self, units: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """BM25 of the given units only, for a query's distinct terms ``columns``
        (ascending): each column's entry for each unit found by a binary search of the
        column, added column by column from 0, the order :meth:`view`'s sums add in,
        so the same bits. Reads no posting whole."""
        units = np.asarray(units, dtype=np.int64)
        out = np.zeros(len(units), dtype=np.float64)
        if not len(units):
            return out
        weights = self.weights
        for column in np.asarray(columns, dtype=np.int64).tolist():  # a query's terms
            start, end = int(weights.indptr[column]), int(weights.indptr[column + 1])
            if start == end:
                continue
            rows = weights.indices[start:end]
            at = np.minimum(np.searchsorted(rows, units), end - start - 1)
            held = rows[at] == units
            out[held] += weights.data[start + at[held]]
        return out

    def found_view(self, found: np.ndarray, term_ids: Iterable[int]) -> RescoredView:
        """The BM25 view over units found elsewhere (an engine's term postings), each
        scored exactly by :meth:`unit_scores`; ranks beyond them from an even sample."""
        columns = term_columns(term_ids)

        def exact(units: np.ndarray) -> np.ndarray:
            return self.unit_scores(units, columns)

        return RescoredView.of_found(found, exact, self.weights.shape[0])

    def view(self, term_ids: Iterable[int]) -> PositiveView:
        """The units a query's terms reach and their BM25, read from those terms' postings
        only: no array as long as the corpus unless they hold a sizeable share of it
        (``search.postings.summed_view``)."""
        return postings_view(self.weights, term_columns(term_ids))
