"""Corpus BLEU and chrF of translations with sacrebleu, against one or more references each.

The signatures (sacrebleu's record of every setting: tokenizer, smoothing, n-gram orders,
number of references, version) go with the scores, so two numbers are only compared when
they were computed alike. BLEU's tokenizer is fixed to ``13a`` (sacrebleu's default for
English and Greek alike) and written out, chrF keeps its defaults (character 6-grams, beta 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

BLEU_TOKENIZER = "13a"


class Scores(NamedTuple):
    """Corpus scores in 0..100 and the sacrebleu signatures that say how they were made."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str


def score(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> Scores:
    """Corpus BLEU and chrF of ``hypotheses`` (N,) against ``references`` (N, variable): one
    list of acceptable translations per hypothesis, at least one each."""
    from sacrebleu.metrics import BLEU, CHRF  # only here: importing it takes a moment

    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} lists of references: give one "
            "list per hypothesis"
        )
    if any(len(refs) == 0 for refs in references):
        raise ValueError("every hypothesis needs at least one reference")
    # sacrebleu wants reference streams: stream k holds every sentence's k-th reference, None
    # where a sentence has fewer
    depth = max((len(refs) for refs in references), default=1)
    streams = [[refs[k] if k < len(refs) else None for refs in references] for k in range(depth)]
    hyps = list(hypotheses)
    bleu, chrf = BLEU(tokenize=BLEU_TOKENIZER), CHRF()
    bleu_score, chrf_score = bleu.corpus_score(hyps, streams), chrf.corpus_score(hyps, streams)
    return Scores(
        float(bleu_score.score),
        float(chrf_score.score),
        str(bleu.get_signature()),
        str(chrf.get_signature()),
    )
