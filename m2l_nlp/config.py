"""Every setting of the course in one home: presets, training settings, model sizes, the
practical-1 baselines and the reverse task (``m2l_nlp.overrides`` changes them: ``KEY=VALUE``).

A :class:`Preset` is a whole recipe: how reviews are encoded (vocabulary, length, pair
tokens), which model (``architecture``: the transformer or a practical-1 baseline) with which
sizes (``model``), how it trains (``train``: the fields of :class:`TrainSettings`) and how
many training reviews validate it. ``m2l-nlp train --preset NAME --set train.learning_rate=1e-3``
is :func:`m2l_nlp.overrides.override` on ``PRESETS[NAME]``; :meth:`Preset.settings` turns its
``train`` dict into the :class:`TrainSettings` that
:func:`m2l_nlp.train.optim.make_optimizer` reads.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import typing
from typing import Any

# The tokenizer's five special tokens and at least one token of text; here, where the
# settings are checked, as config imports nothing of ours (m2l_nlp.data.tokenization checks it).
MIN_VOCAB_SIZE = 6


@functools.cache
def _declared_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # evaluates the annotations: once per class


def check_field_types(settings: Any) -> None:
    """Raise ``ValueError`` if a field of the dataclass ``settings`` does not hold the type
    it is declared with: a whole number for ``int``, a finite number for ``float`` (NumPy
    numbers count; ``NaN``, ``inf`` and ``1e400`` do not), ``true``/``false`` for ``bool``,
    text for ``str``. Other declarations (``dict``, ``int | None``, ...) are not checked.
    Values typed on a command line meet this first."""
    words = {bool: "true or false", int: "a whole number", float: "a finite number", str: "text"}
    hints = _declared_types(type(settings))
    for field in dataclasses.fields(settings):
        kind = hints.get(field.name)
        if kind not in words:
            continue
        value = getattr(settings, field.name)
        if kind is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)  # a NaN rate would train to a NaN loss
        elif kind is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise ValueError(f"{field.name} must be {words[kind]}, not {value!r}")


def check_at_least(settings: Any, least: int, names: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless each field ``names`` of ``settings`` is ``least`` or more."""
    for name in names:
        value = getattr(settings, name)
        if value < least:
            raise ValueError(f"{name} must be at least {least}, not {value}")


def check_fraction(settings: Any, names: tuple[str, ...], *, one: bool = False) -> None:
    """Raise ``ValueError`` unless each field ``names`` of ``settings`` is in ``[0, 1)``
    (``[0, 1]`` with ``one``)."""
    for name in names:
        value = getattr(settings, name)
        if not (0 <= value <= 1 if one else 0 <= value < 1):
            raise ValueError(f"{name} must be in [0, {'1]' if one else '1)'}, not {value}")


def check_heads(settings: Any) -> None:
    """Raise ``ValueError`` unless ``num_heads`` (at least 1) divides ``d_model``: each head
    reads ``d_model / num_heads`` of the features."""
    check_at_least(settings, 1, ("num_heads", "d_model"))
    if settings.d_model % settings.num_heads:
        raise ValueError(
            f"d_model ({settings.d_model}) must be divisible by num_heads ({settings.num_heads})"
        )


@dataclasses.dataclass(frozen=True)
class ClassifierConfig:
    """Sizes of the transformer classifier of practical 2.

    The defaults are the seed tutorial's model (d_model 32, 2 layers, 8 heads, d_ff 32,
    sequences of 600 tokens); the training recipes override them.
    """

    vocab_size: int = 20000
    num_layers: int = 2
    num_heads: int = 8
    d_model: int = 32
    d_ff: int = 32
    p_dropout: float = 0.1
    max_len: int = 600
    pooling: str = "mean"

    def __post_init__(self) -> None:
        check_field_types(self)
        check_at_least(self, 1, ("vocab_size", "num_layers", "d_ff", "max_len"))
        check_heads(self)
        check_fraction(self, ("p_dropout",))
        if self.pooling not in ("mean", "max", "mean_max"):
            raise ValueError(f"pooling must be 'mean', 'max' or 'mean_max', not {self.pooling!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ClassifierConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown model settings {unknown}; known: {sorted(known)}")
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Sizes of practical 3's models: the character language model (``num_layers``
    decoder blocks) and the English-Greek translator (``num_layers`` encoder blocks and as
    many decoder blocks, one vocabulary shared by both languages).

    ``max_len`` is the window: the language model's longest text, prompt and generated
    characters together; the translator's longest source, and longest translation with
    its end token."""

    vocab_size: int = 100
    num_layers: int = 2
    num_heads: int = 4
    d_model: int = 128
    d_ff: int = 512
    p_dropout: float = 0.1
    max_len: int = 128

    def __post_init__(self) -> None:
        check_field_types(self)
        check_at_least(self, 1, ("vocab_size", "num_layers", "d_ff", "max_len"))
        check_heads(self)
        check_fraction(self, ("p_dropout",))


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """How to train: optimisation, schedule, cropping and evaluation settings."""

    epochs: int = 4
    batch_size: int = 32
    learning_rate: float = 2e-3
    warmup_fraction: float = 0.05  # of all steps, linear warm-up from 0
    final_lr_fraction: float = 0.02  # cosine decays to learning_rate * this
    weight_decay: float = 0.05  # AdamW, on matrices only (not biases, norms)
    clip_norm: float = 1.0  # global gradient-norm clipping (0: none)
    crop_len: int = 256  # training windows: a random crop of this many tokens
    token_dropout: float = 0.0  # training only: hide this fraction of tokens (word dropout)
    ema_decay: float = 0.0  # > 0: evaluate and keep a moving average of the parameters
    eval_every: int = 1  # evaluate every k epochs (and always after the last)
    keep_best: bool = True  # with eval data: return the epoch with the best eval accuracy
    eval_batch_size: int = 128
    # gradient accumulation: split a batch so that rows * width**2 <= this per device;
    # None: CPU_MICRO_BATCH_CELLS on a CPU (cache-sized pieces), no split on a GPU/TPU; 0: off
    micro_batch_cells: int | None = None
    # optimizer steps per jitted call (a lax.scan over K batches of one width): on a GPU a step
    # of batch 8 is too short to pay for its launch, so K = 8 runs more reviews per second; on
    # a CPU, or with batches of 128, 1 is as fast (benchmarks/README.md)
    steps_per_call: int = 1
    # the widths batches are cut to (length buckets); empty: the platform's
    # (m2l_nlp.data.batching.default_widths), made for reviews of hundreds of tokens
    widths: tuple[int, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        check_field_types(self)
        object.__setattr__(self, "widths", tuple(self.widths))
        if not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in self.widths):
            raise ValueError(f"widths must be whole numbers of at least 1, not {list(self.widths)}")
        positive = ("epochs", "batch_size", "crop_len", "eval_every", "eval_batch_size")
        check_at_least(self, 1, (*positive, "steps_per_call"))
        check_at_least(self, 0, ("seed",))
        check_fraction(self, ("token_dropout", "ema_decay"))
        check_fraction(self, ("warmup_fraction", "final_lr_fraction"), one=True)
        if self.micro_batch_cells is not None and self.micro_batch_cells < 0:
            raise ValueError(
                f"micro_batch_cells must be >= 0 or None, not {self.micro_batch_cells}"
            )
        for name in ("clip_norm", "weight_decay"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: off), not {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, not {self.learning_rate}")


TRANSFORMER = "transformer"
BASELINES = ("bow-mlp", "bigram-mlp", "lstm")  # practical 1's models
LANGUAGE_MODEL = "char-lm"  # practical 3's decoder, on characters
TRANSLATION = "translate"  # practical 3's encoder-decoder, English to Greek


@dataclasses.dataclass(frozen=True)
class BaselineConfig:
    """Settings of a practical-1 baseline.

    Attributes:
        model: ``"bow-mlp"`` (multi-hot tokens), ``"bigram-mlp"`` (tokens + hashed bigrams)
            or ``"lstm"``.
        hidden_sizes: hidden layers of the MLP.
        p_dropout: dropout rate (MLP hidden layers; LSTM final state).
        num_buckets: bigram buckets (``bigram-mlp``).
        use_tfidf: weigh the MLP features by TF-IDF fitted on the training reviews.
        input_dropout: dropout rate on the MLP's input features (training only).
        embed_size, hidden_size: LSTM sizes.
        max_len: the LSTM reads only the first ``max_len`` tokens (recurrence is slow on CPU).
    """

    model: str = "bigram-mlp"
    hidden_sizes: tuple[int, ...] = (64,)
    p_dropout: float = 0.5
    num_buckets: int = 2**17
    use_tfidf: bool = False
    input_dropout: float = 0.0
    embed_size: int = 64
    hidden_size: int = 64
    max_len: int = 256

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.model not in BASELINES:
            raise ValueError(
                f"unknown baseline {self.model!r}: choose one of {', '.join(BASELINES)}"
            )
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        check_fraction(self, ("p_dropout", "input_dropout"))
        check_at_least(self, 1, ("num_buckets", "max_len", "embed_size", "hidden_size"))
        if not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.hidden_sizes
        ):
            raise ValueError(
                f"hidden_sizes must be whole numbers of at least 1, not {list(self.hidden_sizes)}"
            )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["hidden_sizes"] = list(self.hidden_sizes)
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BaselineConfig:
        return cls(**values)


# each architecture's model config: what a preset's `model` settings fill in
MODEL_CONFIGS: dict[str, type] = {
    TRANSFORMER: ClassifierConfig,
    **dict.fromkeys(BASELINES, BaselineConfig),
    LANGUAGE_MODEL: TransformerConfig,
    TRANSLATION: TransformerConfig,
}


@dataclasses.dataclass(frozen=True)
class Preset:
    """A full recipe: data encoding, model and its sizes, training settings, validation size."""

    description: str
    vocab_size: int  # tokens (for char-lm: at most this many characters, padding included)
    # tokens kept per review (char-lm: the window, in characters; translate: the longest
    # source, and the longest translation with its end token)
    seq_len: int
    model: dict[str, Any]  # the fields of the architecture's config (ClassifierConfig, ...)
    train: dict[str, Any]  # TrainSettings fields
    val_size: int  # held out from the training split for per-epoch validation
    architecture: str = TRANSFORMER  # or one of BASELINES, LANGUAGE_MODEL or TRANSLATION
    embed_scale: float = 1.0  # initial token embeddings times this (transformer)
    bigram_tokens: int = 0  # > 0: that many frequent token pairs as extra tokens (bigrams.py)
    # True: the model reads each pair token as its own residual row plus its first token's
    # row (m2l_nlp.model.classifiers.pair_tie); checkpoints store the sum
    bigram_backoff: bool = False
    # True: a test run trains on every training review for the preset's epochs (chosen by
    # --no-test runs, which hold out val_size) and keeps the last. --val-size overrides it.
    final_fit: bool = False
    # > 0 (char-lm): train on the first this many training reviews only, a CPU-sized share
    train_reviews: int = 0
    # the recipe's changes for the bundled small data (`--data small`): fields by name, and
    # `model`/`train` dicts merged into the recipe's (:meth:`for_small_data`)
    small_data: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.architecture not in MODEL_CONFIGS:
            raise ValueError(
                f"architecture must be one of {', '.join(MODEL_CONFIGS)}, not {self.architecture!r}"
            )
        limits = {
            "vocab_size": MIN_VOCAB_SIZE,
            **dict.fromkeys(("bigram_tokens", "val_size", "train_reviews"), 0),
            "seq_len": 1,
        }
        for name, least in limits.items():
            check_at_least(self, least, (name,))
        if self.train_reviews and self.architecture != LANGUAGE_MODEL:
            raise ValueError(
                f"train_reviews is for the {LANGUAGE_MODEL} preset: the classifiers train on "
                "every training review (set train_reviews=0)"
            )
        if self.embed_scale <= 0:
            raise ValueError(f"embed_scale must be positive, not {self.embed_scale}")
        if self.bigram_backoff and not (self.bigram_tokens and self.architecture == TRANSFORMER):
            raise ValueError(
                "bigram_backoff needs the transformer with pair tokens (bigram_tokens > 0): "
                "set bigram_backoff=false to train without them"
            )

    def for_small_data(self) -> Preset:
        """This recipe as it runs on the bundled small data: ``small_data`` applied (a
        recipe made for 10,000 reviews learns nothing from 800 in one epoch)."""
        changes = dict(self.small_data)
        model = {**self.model, **changes.pop("model", {})}
        train = {**self.train, **changes.pop("train", {})}
        return dataclasses.replace(self, model=model, train=train, small_data={}, **changes)

    def settings(self, **changes: Any) -> TrainSettings:
        """The training settings of this recipe (``changes`` win, e.g. ``seed=1``)."""
        return TrainSettings(**{**self.train, **changes})

    def model_config(
        self, vocab_size: int | None = None
    ) -> ClassifierConfig | BaselineConfig | TransformerConfig:
        """The model's config, for the data's vocabulary (pair tokens included)."""
        vocab = self.vocab_size if vocab_size is None else vocab_size
        config = MODEL_CONFIGS[self.architecture]
        if config is BaselineConfig:  # one config for practical 1's models, which it names
            return BaselineConfig(model=self.architecture, **self.model)
        return config(vocab_size=vocab, max_len=self.seq_len, **self.model)

    def check(self) -> None:
        """Raise ``ValueError`` (or ``TypeError``) if the model or training settings are wrong."""
        self.settings()
        self.model_config()
        if self.small_data:
            self.for_small_data().check()

    def val_size_for(self, n_train: int) -> int:
        """The validation split for a training split of ``n_train`` reviews: at most a fifth."""
        return min(self.val_size, n_train // 5)


def _baseline(description: str, architecture: str, model: dict, seq_len: int, **train) -> Preset:
    """A practical-1 recipe: Adam at a constant rate, no weight decay, no crop, no buckets'
    micro-batches, the best epoch on the validation reviews kept."""
    constant_adam = dict(
        warmup_fraction=0.0, final_lr_fraction=1.0, weight_decay=0.0, clip_norm=0.0
    )
    settings = dict(constant_adam, crop_len=seq_len, micro_batch_cells=0, **train)
    return Preset(description, 20000, seq_len, model, settings, 2500, architecture)


PRESETS: dict[str, Preset] = {
    "default": Preset(
        "the recipe of `make train` (full IMDB): 50,000 frequent token pairs as extra tokens "
        "that back off to their first token, "
        "1 layer, d_model 128, mean pooling, dropout 0.5, batches of 128, random 512-token "
        "crops with a fifth of their tokens hidden, 4 epochs, moving average of the weights, "
        "evaluation averaged over 512-token windows; "
        "the test run trains on all training reviews (final fit)",
        vocab_size=20000,
        seq_len=1024,
        model=dict(num_layers=1, num_heads=4, d_model=128, d_ff=256, p_dropout=0.5, pooling="mean"),
        train=dict(
            epochs=4,
            batch_size=128,
            learning_rate=4e-3,
            weight_decay=0.3,
            crop_len=512,
            token_dropout=0.2,  # chosen on validation at 3 seeds (docs/results.md)
            ema_decay=0.992,
        ),
        val_size=2500,
        embed_scale=0.1,
        bigram_tokens=50000,
        bigram_backoff=True,  # chosen on film-block validation at 3 seeds (docs/results.md)
        final_fit=True,
    ),
    "seed": Preset(
        "the tutorial's model: d_model 32, 2 layers, 8 heads, d_ff 32, 600 tokens, mean pool",
        vocab_size=20000,
        seq_len=600,
        model=dict(num_layers=2, num_heads=8, d_model=32, d_ff=32, p_dropout=0.1, pooling="mean"),
        train=dict(epochs=2, batch_size=8, learning_rate=1e-3, weight_decay=0.0, crop_len=600),
        val_size=2500,
    ),
    "demo": Preset(
        "a tiny model for the bundled small dataset (`--data small`; half a minute of "
        "CPU time), with pair tokens",
        vocab_size=2000,
        seq_len=256,
        model=dict(
            num_layers=1, num_heads=2, d_model=32, d_ff=64, p_dropout=0.1, pooling="mean_max"
        ),
        train=dict(epochs=3, batch_size=16, learning_rate=3e-3, weight_decay=0.01, crop_len=128),
        val_size=50,
        bigram_tokens=2000,
    ),
    # Practical 1's baselines (`--model NAME` or `--preset NAME`). Bags of words need no
    # cut: 2048 tokens keep all of almost every review; the LSTM reads its first 256.
    "bow-mlp": _baseline(
        "practical 1: multi-hot bag of words, MLP (64 hidden, dropout 0.5)",
        "bow-mlp",
        dict(hidden_sizes=(64,), p_dropout=0.5),
        2048,
        epochs=3,
        batch_size=128,
        learning_rate=1e-3,
    ),
    "bigram-mlp": _baseline(
        "practical 1: bag of words and hashed bigrams, TF-IDF, MLP (64 hidden, dropout 0.5)",
        "bigram-mlp",
        dict(hidden_sizes=(64,), p_dropout=0.5, use_tfidf=True),
        2048,
        epochs=3,
        batch_size=128,
        learning_rate=1e-3,
    ),
    "lstm": _baseline(
        "practical 1: LSTM (64 units) over the first 256 tokens",
        "lstm",
        dict(embed_size=64, hidden_size=64, p_dropout=0.2, max_len=256),
        256,
        epochs=6,
        batch_size=64,
        learning_rate=3e-3,
        clip_norm=1.0,
    ),
}

PRESETS["unigram"] = dataclasses.replace(
    PRESETS["default"],
    description="the default without pair tokens: batches of 32, 256-token crops, 4 epochs",
    train=dict(
        PRESETS["default"].train,
        epochs=4,
        batch_size=32,
        learning_rate=2e-3,
        crop_len=256,
        token_dropout=0.0,
        ema_decay=0.998,
    ),
    bigram_tokens=0,
    bigram_backoff=False,
    final_fit=False,  # its results row held out the validation reviews
)

PRESETS["char-lm"] = Preset(
    "practical 3: a character language model of IMDB reviews (at most 158 characters, "
    "the most frequent), 2 decoder blocks, d_model 128, no dropout, windows of 128 "
    "characters, one epoch over 10,000 training reviews at a learning rate of 1e-2 "
    "(8.5 minutes measured alone on a 2-core CPU); on the bundled small data (`--data "
    "small`) 1 block, d_model 64, batches of 32, 3 epochs (50 s of CPU time measured)",
    vocab_size=160,
    seq_len=128,
    model=dict(num_layers=2, num_heads=4, d_model=128, d_ff=512, p_dropout=0.0),
    train=dict(
        epochs=1,
        batch_size=64,
        learning_rate=1e-2,
        weight_decay=0.01,
        crop_len=128,
        warmup_fraction=0.02,
        keep_best=False,
    ),
    val_size=500,  # reviews held out of the training split, read every epoch
    architecture=LANGUAGE_MODEL,
    train_reviews=10000,
    # 800 reviews read once are 32 steps, too few to beat the bigram counts (docs/results.md)
    small_data=dict(
        model=dict(num_layers=1, d_model=64, d_ff=256), train=dict(batch_size=32, epochs=3)
    ),
)

PRESETS["translate"] = Preset(
    "practical 3: English to Greek on the Tatoeba pairs, a tokenizer of 8,000 pieces shared "
    "by both languages, 2 encoder and 2 decoder blocks, d_model 128, sentences of at most "
    "32 tokens, 10 epochs (15 min 36 s measured alone on a 2-core CPU)",
    vocab_size=8000,
    seq_len=32,
    model=dict(num_layers=2, num_heads=4, d_model=128, d_ff=512, p_dropout=0.1),
    train=dict(
        epochs=10,
        batch_size=64,
        learning_rate=2e-3,  # chosen on validation chrF (docs/results.md)
        weight_decay=0.01,
        warmup_fraction=0.05,
        keep_best=False,
        widths=(8, 12, 16, 24, 32),  # a pair is as wide as its longer sentence: most are short
    ),
    val_size=0,  # the split is by sentence component (m2l_nlp.data.tatoeba.split_pairs)
    architecture=TRANSLATION,
)

SMALL_DATA_PRESET = "demo"  # what `--data small` trains when no preset is named


@dataclasses.dataclass(frozen=True)
class ReverseConfig:
    """The reverse-sequence task (m2l_nlp.train.reverse): sizes and training settings."""

    num_digits: int = 10
    seq_len: int = 16
    num_layers: int = 1
    num_heads: int = 1
    d_model: int = 32
    d_ff: int = 64
    p_dropout: float = 0.0
    batch_size: int = 128
    steps: int = 400  # batches of random sequences in all
    epochs: int = 10  # steps / epochs batches of distinct sequences, each seen epochs times
    learning_rate: float = 5e-3
    seed: int = 0

    def __post_init__(self) -> None:
        check_field_types(self)
        check_at_least(self, 2, ("num_digits", "seq_len"))
        check_at_least(self, 1, ("num_layers", "d_ff", "batch_size", "steps", "epochs"))
        check_at_least(self, 0, ("seed",))
        check_heads(self)
        check_fraction(self, ("p_dropout",))
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, not {self.learning_rate}")

    def settings(self) -> TrainSettings:
        """Adam with a short warm-up and a cosine decay over all steps."""
        return TrainSettings(
            epochs=self.epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            warmup_fraction=min(50, self.steps // 5 + 1) / self.steps,
            final_lr_fraction=0.0,
            weight_decay=0.0,
            clip_norm=0.0,
            crop_len=self.seq_len,
            micro_batch_cells=0,
            keep_best=False,
            seed=self.seed,
        )
