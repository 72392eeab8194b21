"""A translation baseline without learning: answer with the Greek of the nearest training English.

Sentences are compared by TF-IDF weighted character 1- to 4-grams of the lowercased sentence
padded with a space at each end (word starts and ends count), by cosine similarity. Scores
come from an inverted index (gram -> training sentences that hold it), one ``np.bincount``
per query, so the whole Tatoeba test side runs in seconds. Pure Python and NumPy.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import numpy as np

MAX_N = 4  # character n-grams of 1 to MAX_N characters


def char_ngrams(sentence: str, max_n: int = MAX_N) -> Counter[str]:
    """The counts of the character 1- to ``max_n``-grams of `` sentence.lower() ``."""
    padded = f" {sentence.lower()} "
    return Counter(
        padded[i : i + n] for n in range(1, max_n + 1) for i in range(len(padded) - n + 1)
    )


class RetrievalBaseline:
    """Translate English to Greek by retrieval from ``pairs``, ``(english, greek)`` tuples
    (a :class:`m2l_nlp.data.tatoeba.Pair` is one).

    An English sentence with several Greek renderings answers with its first one; of training
    sentences equally similar to a query, the first one seen wins.
    """

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        greek: dict[str, str] = {}
        for en, el in pairs:
            greek.setdefault(en, el)  # the first rendering
        if not greek:
            raise ValueError("RetrievalBaseline needs at least one training pair")
        self.english = list(greek)
        self.greek = list(greek.values())
        self.gram_id: dict[str, int] = {}
        doc_grams = [char_ngrams(s) for s in self.english]
        rows, cols, tfs = [], [], []
        for row, grams in enumerate(doc_grams):
            for gram, count in grams.items():
                rows.append(row)
                cols.append(self.gram_id.setdefault(gram, len(self.gram_id)))
                tfs.append(count)
        rows_a, cols_a = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        df = np.bincount(cols_a, minlength=len(self.gram_id))
        n_docs = len(self.english)
        self.idf = np.log((1 + n_docs) / (1 + df)) + 1.0  # smoothed: no gram weighs zero
        weight = (1.0 + np.log(np.asarray(tfs, dtype=np.float64))) * self.idf[cols_a]
        norm = np.sqrt(np.bincount(rows_a, weights=weight**2, minlength=n_docs))
        weight /= norm[rows_a]  # unit rows: the dot product is the cosine
        # the inverted index in CSR form: the postings of gram g are [indptr[g], indptr[g + 1])
        order = np.argsort(cols_a, kind="stable")
        self.post_doc = rows_a[order]
        self.post_weight = weight[order]
        self.df = df
        self.indptr = np.concatenate([[0], np.cumsum(df)])

    def nearest(self, sentence: str) -> int:
        """The index (into ``self.english``) of the training sentence most similar to
        ``sentence``; 0 if it shares no n-gram with any."""
        found = [
            (self.gram_id[gram], count)
            for gram, count in char_ngrams(sentence).items()
            if gram in self.gram_id
        ]
        if not found:
            return 0
        grams = np.fromiter((g for g, _ in found), dtype=np.int64, count=len(found))
        tf = np.fromiter((1.0 + math.log(c) for _, c in found), dtype=np.float64, count=len(found))
        query = tf * self.idf[grams]  # left unnormalised: it scales every score alike
        starts, lens = self.indptr[grams], self.df[grams]
        # the positions of all postings of these grams, without a Python loop
        within = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        at = np.repeat(starts, lens) + within
        scores = np.bincount(
            self.post_doc[at],
            weights=self.post_weight[at] * np.repeat(query, lens),
            minlength=len(self.english),
        )
        return int(np.argmax(scores))  # the first of equal scores

    def translate(self, sentences: list[str]) -> list[str]:
        """The Greek of the nearest training English sentence, for each of ``sentences``."""
        return [self.greek[self.nearest(s)] for s in sentences]
