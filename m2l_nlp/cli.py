"""Command line ``m2l-nlp train | predict | generate | translate | grade | class``: argument
parsing and printing only.

The work is done by :mod:`m2l_nlp.runs` (training, and reading a checkpoint to predict,
generate or translate) and by the grader (:mod:`m2l_nlp.grading`).
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from m2l_nlp import devices
from m2l_nlp.config import BASELINES, PRESETS, SMALL_DATA_PRESET, TRANSFORMER
from m2l_nlp.impl import available_impls, default_impl, impl_help
from m2l_nlp.overrides import override
from m2l_nlp.runs.predict_input import MAX_MB

DEFAULT_PROMPT = "The film"  # what `generate` continues when given no prompt

DEFAULT_PRESET = "default"
DEFAULT_CHECKPOINT = Path("runs") / DEFAULT_PRESET / "checkpoint"
DEFAULT_LM_CHECKPOINT = Path("runs") / "char-lm" / "checkpoint"
DEFAULT_TRANSLATOR = Path("runs") / "translate" / "checkpoint"
DESCRIPTION = (
    "m2l-nlp: train the course's models (sentiment classifiers on IMDB, a character language "
    "model, an English-Greek translator), use a trained one (predict, generate, translate), "
    "and grade the exercises."
)


# modules of kinds of run (m2l_nlp.runs.kinds) that bring a command of their own, each
# with an ``add_command(subparsers)``; the course's three are written out below
KIND_COMMANDS: tuple[str, ...] = ()


def _presets_epilog() -> str:
    """The presets, one paragraph each, for the end of ``m2l-nlp train --help``."""
    width = max(map(len, PRESETS)) + 2
    lines = ["presets (m2l_nlp/config.py; change one setting with --set KEY=VALUE):"]
    for name, preset in PRESETS.items():
        text = textwrap.wrap(preset.description, 88 - width - 2)
        lines.append(f"  {name:<{width}}{text[0]}")
        lines += [" " * (width + 2) + line for line in text[1:]]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="m2l-nlp", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser(
        "train",
        help="train a preset's model (an IMDB classifier by default), test it, save the run",
        description="Train a preset's model, validate it after each epoch, score the test "
        "reviews once and write the run to --out.",
        epilog=_presets_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "--data",
        default=None,
        metavar="PATH|small",
        help="aclImdb_v1.tar.gz, an extracted aclImdb/ folder, or 'small' for the bundled "
        "small dataset (default: $M2L_NLP_IMDB, else download the official archive)",
    )
    train.add_argument(
        "--preset",
        choices=list(PRESETS),
        default=None,
        metavar="NAME",
        help="the recipe, one of the presets listed below (default: default; demo with "
        "--data small)",
    )
    train.add_argument(
        "--model",
        choices=(TRANSFORMER, *BASELINES),
        default=None,
        help="transformer (default), or a practical-1 baseline: the same as --preset NAME",
    )
    train.add_argument(
        "--epochs",
        type=_whole_number(1),
        default=None,
        help="epochs to train (default: the preset's)",
    )
    train.add_argument(
        "--impl",
        choices=available_impls(),
        default=default_impl(),
        help=impl_help("whose model code to train"),
    )
    train.add_argument(
        "--val-size",
        type=_whole_number(0),
        default=None,
        help="training reviews held out to validate after each epoch and keep the best one "
        "(default: the preset's, or 0 for a final fit such as the default preset's test run; "
        "0 trains on the whole training split)",
    )
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one setting of the preset, e.g. --set bigram_tokens=100000 "
        "--set train.crop_len=512 --set model.d_model=64 (repeatable; default: none)",
    )
    train.add_argument(
        "--no-test",
        action="store_true",
        help="validation only: do not evaluate on the test set (for choosing a recipe)",
    )
    train.add_argument(
        "--seed",
        type=_whole_number(0),
        default=0,
        help="seed of the data shuffle, validation split, initialisation and dropout (default: 0)",
    )
    train.add_argument(
        "--out",
        default=None,
        help="output folder (default: runs/<preset>, or runs/<preset>-val with --no-test)",
    )
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --out (at the end of the new run; default: refuse)",
    )
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run of --out from its last completed epoch (same "
        "options as the interrupted run)",
    )
    train.add_argument(
        "--cache-dir",
        default=None,
        help="where prepared data are cached (default: $M2L_NLP_CACHE, else data/cache)",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bars")

    predict = sub.add_parser(
        "predict",
        help="score your own reviews with a trained checkpoint",
        description="Print, for each review, the probability that it is positive.",
    )
    predict.add_argument("texts", nargs="*", help="one or more reviews (quote each)")
    _add_input_options(
        predict,
        file_help="a file holding one review, UTF-8 ('-' reads standard input; repeatable)",
        max_mb_help="the largest review to read, in MB, from arguments, files and standard "
        f"input alike (default: {MAX_MB}; a review above it is refused)",
    )
    _add_checkpoint_options(
        predict, "m2l-nlp train", f"{DEFAULT_CHECKPOINT}, the run of `make train`"
    )

    generate = sub.add_parser(
        "generate",
        help="continue a text with a trained character language model (practical 3)",
        description="Print a continuation of PROMPT, one character at a time (key/value cache).",
    )
    generate.add_argument(
        "prompt",
        nargs="?",
        default=DEFAULT_PROMPT,
        help=f"the text to continue (default: {DEFAULT_PROMPT!r})",
    )
    generate.add_argument(
        "--max-chars",
        type=_whole_number(1),
        default=None,
        help="new characters (default: as many as the model's window holds after the prompt)",
    )
    generate.add_argument(
        "--temperature",
        type=_positive_number,
        default=0.8,
        help="below 1: safer, more repetitive text; above 1: more surprising (default: 0.8)",
    )
    generate.add_argument(
        "--top-k", type=_whole_number(1), default=None, help="draw among the K likeliest only"
    )
    generate.add_argument("--seed", type=_whole_number(0), default=0, help="the random draws")
    _add_checkpoint_options(generate, "m2l-nlp train --preset char-lm", str(DEFAULT_LM_CHECKPOINT))

    translate = sub.add_parser(
        "translate",
        help="translate English to Greek with a trained translator (practical 3)",
        description="Print the Greek of each SENTENCE (key/value cache; greedy, or --beam N).",
    )
    translate.add_argument("sentences", nargs="*", help="English sentences to translate")
    translate.add_argument(
        "--beam",
        type=_whole_number(1),
        default=None,
        metavar="N",
        help="beam search with N beams, as many as memory holds (default: greedy decoding)",
    )
    _add_input_options(
        translate,
        file_help="translate each line of this UTF-8 file too, blank lines aside ('-' reads "
        "standard input; repeatable; default: none)",
        max_mb_help=f"the largest input to read, in MB (default: {MAX_MB}; the model reads "
        "only the first tokens of a sentence)",
    )
    _add_checkpoint_options(translate, "m2l-nlp train --preset translate", str(DEFAULT_TRANSLATOR))

    sub.add_parser(
        "grade", help="grade the exercises (`m2l-nlp grade --help` for its options)", add_help=False
    )
    sub.add_parser(
        "class",
        help="the instructor's class: gradebook, CSV (`m2l-nlp class --help`)",
        add_help=False,
    )
    train.set_defaults(run=cmd_train)
    predict.set_defaults(run=cmd_predict)
    generate.set_defaults(run=cmd_generate)
    translate.set_defaults(run=cmd_translate)
    for module in KIND_COMMANDS:  # a kind of run's own command: add_command(sub) sets its run
        importlib.import_module(module).add_command(sub)
    return parser


def _add_input_options(parser: argparse.ArgumentParser, file_help: str, max_mb_help: str) -> None:
    """``--file`` (repeatable) and ``--max-mb``: the inputs a command reads beside its
    arguments, and the size above which it refuses one."""
    parser.add_argument("--file", action="append", default=[], metavar="PATH", help=file_help)
    parser.add_argument("--max-mb", type=_whole_number(1), default=MAX_MB, help=max_mb_help)


def _add_checkpoint_options(parser: argparse.ArgumentParser, written_by: str, default: str) -> None:
    """``--checkpoint`` and ``--impl``: what every command that reads a checkpoint takes.
    ``written_by`` is the command that writes such a checkpoint, ``default`` its folder."""
    parser.add_argument(
        "--checkpoint",
        default=None,
        help=f"a checkpoint folder written by `{written_by}` (default: {default})",
    )
    parser.add_argument(
        "--impl",
        choices=available_impls(),
        default=default_impl(),
        help=impl_help("whose model code reads the checkpoint"),
    )


def _positive_number(text: str) -> float:
    """An argparse type: a number above 0."""
    value = float(text)  # a ValueError: argparse says "invalid positive-number value: 'x'"
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text}")
    return value


_positive_number.__name__ = "positive-number"


def _whole_number(lowest: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``lowest``."""

    def parse(text: str) -> int:
        value = int(text)  # a ValueError: argparse says "invalid whole-number value: 'x'"
        if value < lowest:
            raise argparse.ArgumentTypeError(f"must be {lowest} or more, not {value}")
        return value

    parse.__name__ = "whole-number"
    return parse


def _preset_name(args: argparse.Namespace) -> str:
    """``--preset``, else ``--model``'s baseline, else demo for ``--data small``, else default."""
    if args.model not in (None, TRANSFORMER):
        if args.preset not in (None, args.model):
            raise ValueError(f"--model {args.model} and --preset {args.preset}: give one of them")
        return args.model
    if args.preset is not None:
        if args.model == TRANSFORMER and PRESETS[args.preset].architecture != TRANSFORMER:
            raise ValueError(f"--preset {args.preset} is a baseline, not the transformer")
        return args.preset
    return SMALL_DATA_PRESET if args.data == "small" else DEFAULT_PRESET


def cmd_train(args: argparse.Namespace) -> int:
    from m2l_nlp.runs.experiment import TrainRequest, TrainStopped, run_training
    from m2l_nlp.runs.folders import default_out

    start = time.perf_counter()
    try:
        name = _preset_name(args)
        preset = PRESETS[name]
        if args.data == "small":  # the recipe's own changes for the bundled reviews, if any
            preset = preset.for_small_data()
        preset = override(preset, args.set)
        if args.epochs is not None:
            preset = override(preset, [f"train.epochs={args.epochs}"])
    except (TypeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        request = TrainRequest(
            name=name,
            preset=preset,
            data=args.data,
            out=Path(args.out or default_out(name, args.no_test)),
            cache_dir=Path(args.cache_dir) if args.cache_dir else None,
            changed=tuple(args.set),
            impl=args.impl,
            seed=args.seed,
            val_size=args.val_size,
            no_test=args.no_test,
            overwrite=args.overwrite,
            resume=args.resume,
            progress=not args.no_progress,
        )
        run = run_training(request)
    except TrainStopped as stopped:
        if stopped.interrupted:
            again = [a for a in args.argv if a not in ("--overwrite", "--resume")]
            command = shlex.join(["m2l-nlp", *again, "--resume"])
            print(
                f"\ninterrupted: epoch {stopped.saved['epoch']} of {stopped.saved['epochs']} "
                f"is kept; continue with: {command}",
                file=sys.stderr,
            )
            return 130
        print(f"error: {stopped}", file=sys.stderr)
        return 1
    except ValueError as error:  # a request that cannot run (nothing created), or its data
        print(f"error: {_in_your_code(error, args) or error}", file=sys.stderr)
        return 2
    _print_result(run, request.out, time.perf_counter() - start)
    return 0


def _print_result(run: Any, out: Path, elapsed: float) -> None:
    for line in run.kind.summary(run):  # the test lines of the other kinds came with the log
        print(line)
    print(f"total time: {elapsed:.0f}s")
    metrics = run.metrics
    print(
        f"compilation: {metrics['compiled_programs']} XLA programs (compiled, or loaded from the "
        f"on-disk compilation cache), {metrics['compile_seconds']:.0f}s tracing and compiling"
    )
    written = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    print(f"wrote {out}/: {', '.join(written)}")


def cmd_predict(args: argparse.Namespace) -> int:
    from m2l_nlp.runs.checkpoint import CLASSIFIER, load_checkpoint, predict
    from m2l_nlp.runs.predict_input import read_reviews

    texts = read_reviews(args.texts, args.file, args.max_mb)
    path = Path(args.checkpoint) if args.checkpoint else DEFAULT_CHECKPOINT
    checkpoint = load_checkpoint(path, CLASSIFIER)  # CheckpointError: reported by main
    meta = checkpoint.meta
    trained = f"preset {meta.get('preset') or '?'}, impl {meta.get('impl', '?')}"
    if "test_accuracy" in meta:
        trained += f", test accuracy {meta['test_accuracy']:.4f}"
    print(f"checkpoint: {path} ({trained})")
    for note in _cut_notes(texts, checkpoint):
        print(f"note: {note}", file=sys.stderr)
    probs = predict(texts, checkpoint, impl=args.impl)
    for text, p in zip(texts, probs, strict=True):
        label = "positive" if p >= 0.5 else "negative"
        print(f"{label:8s}  p(positive)={p:.3f}  {_excerpt(text)!r}")
    return 0


def _cut_notes(texts: Sequence[str], checkpoint: Any) -> list[str]:
    """A line for each review longer than the classifier reads (its ``max_len`` tokens),
    saying how much of it is scored."""
    from tokenizers import Tokenizer

    from m2l_nlp.runs.checkpoint import _first_words  # the cut that predict makes first

    max_len, notes = checkpoint.config.max_len, []
    counter = Tokenizer.from_str(checkpoint.tokenizer.to_str())  # a copy that counts all
    counter.no_padding()
    counter.no_truncation()
    for number, text in enumerate(texts, 1):
        start = _first_words(checkpoint.tokenizer, text, max_len)  # a huge text: its start
        offsets = counter.encode(start).offsets
        if len(offsets) > max_len:
            read = start[: offsets[max_len - 1][1]]
            words = sum(1 for _ in re.finditer(r"\S+", text))  # no list of a 10 MB text's words
            notes.append(
                f"review {number} ({_excerpt(text, 30)!r}) is longer than the model reads: only "
                f"its first {max_len} tokens, {len(read.split())} of its {words} words, are "
                "scored"
            )
    return notes


def cmd_generate(args: argparse.Namespace) -> int:
    from m2l_nlp.data.characters import UNKNOWN
    from m2l_nlp.model.generation import WindowError
    from m2l_nlp.model.language_models import language_model
    from m2l_nlp.runs.checkpoint import LANGUAGE_MODEL, load_checkpoint
    from m2l_nlp.runs.language_model import Writer

    path = Path(args.checkpoint) if args.checkpoint else DEFAULT_LM_CHECKPOINT
    checkpoint = load_checkpoint(path, LANGUAGE_MODEL)  # CheckpointError: reported by main
    vocab = checkpoint.tokenizer  # a character model's tokenizer: its characters
    funcs, practical = language_model(checkpoint.config, args.impl)
    writer = Writer(funcs, practical, checkpoint.config, vocab)
    if args.top_k is not None and args.top_k > vocab.size:
        print(f"error: --top-k is at most {vocab.size} (the characters)", file=sys.stderr)
        return 2
    unseen = _unseen(args.prompt, vocab.encode(args.prompt) == UNKNOWN)
    if unseen:
        print(
            f"note: the model never saw {unseen} in training: it reads each as one unknown "
            "character",
            file=sys.stderr,
        )
    room = checkpoint.config.max_len - len(args.prompt)
    try:
        text = writer.write(
            checkpoint.params,
            args.prompt,
            args.max_chars or max(room, 1),
            temperature=args.temperature,
            top_k=args.top_k,
            seed=args.seed,
        )
    except (WindowError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    bits = checkpoint.meta.get("test_bits_per_char")
    trained = f"{bits:.3f} bits per character on test reviews" if bits is not None else "?"
    print(f"checkpoint: {path} ({trained})", file=sys.stderr)
    print(args.prompt + text)
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    from m2l_nlp.data.tokenization import BOS_ID
    from m2l_nlp.model.translators import BeamTooWide, translator
    from m2l_nlp.runs.checkpoint import TRANSLATOR, load_checkpoint
    from m2l_nlp.runs.predict_input import read_reviews
    from m2l_nlp.runs.translation import Translator, reading_notes

    # one reading of arguments and files together: a file alone is enough, and its own
    # errors (missing, empty, not UTF-8) are the ones reported
    read = read_reviews(args.sentences, args.file, args.max_mb, what="sentence")  # InputError
    texts = read[: len(args.sentences)]
    names = [f"sentence {number}" for number in range(1, len(texts) + 1)]
    for file, whole in zip(args.file, read[len(texts) :], strict=True):
        lines = [(n, line) for n, line in enumerate(whole.splitlines(), 1) if line.strip()]
        texts += [line for _, line in lines]
        names += [f"{'standard input' if file == '-' else file}, line {n}" for n, _ in lines]
    path = Path(args.checkpoint) if args.checkpoint else DEFAULT_TRANSLATOR
    checkpoint = load_checkpoint(path, TRANSLATOR)  # CheckpointError: reported by main
    funcs, practical = translator(checkpoint.config, args.impl, start_id=BOS_ID)
    model = Translator(funcs, practical, checkpoint.config, checkpoint.tokenizer)
    for note in reading_notes(checkpoint.tokenizer, texts, checkpoint.config.max_len, names):
        print(f"note: {note}", file=sys.stderr)
    try:
        greek = model.translate(checkpoint.params, texts, beam=args.beam or 0)
    except BeamTooWide as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    scores = checkpoint.meta.get("test_scores", {}).get("greedy")
    trained = f"test BLEU {scores['bleu']:.1f}, chrF {scores['chrf']:.1f}" if scores else "?"
    how = f"beam search, {args.beam} beams" if args.beam else "greedy"
    print(f"checkpoint: {path} ({trained}); {how}", file=sys.stderr)
    for text in greek:
        print(text)
    return 0


def _unseen(text: str, unknown: Any, shown: int = 5) -> str:
    """The distinct characters of ``text`` where ``unknown`` (a mask, one per character) is
    set, quoted, the first ``shown`` of them; empty if none."""
    chars = list(dict.fromkeys(c for c, u in zip(text, unknown, strict=True) if u))
    more = f" and {len(chars) - shown} more" if len(chars) > shown else ""
    return ", ".join(repr(c) for c in chars[:shown]) + more


def _or_the_reference() -> str:
    """The other way out of an unfinished exercise, where this copy holds one (a handout
    holds no reference)."""
    return " or use --impl solutions" if "solutions" in available_impls() else ""


def _excerpt(text: str, width: int = 60) -> str:
    """The start of ``text`` on one line (runs of whitespace as one space), at most ``width``
    characters. Only the first words are looked at: splitting a whole 50 MB review took
    640 MB and seconds."""
    words, size = [], -1
    for word in re.finditer(r"\S+", text):
        words.append(text[word.start() : min(word.end(), word.start() + width + 1)])
        size += 1 + len(words[-1])
        if size > width:
            break
    short = " ".join(words)
    return short if len(short) <= width else short[: width - 3] + "..."


def cmd_grade(pytest_args: Sequence[str]) -> int:
    try:
        from m2l_nlp.grading.local.cli import main as grade_main
    except ImportError as error:
        print(f"error: the grader is not available ({error})", file=sys.stderr)
        return 2
    rest = list(pytest_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return int(grade_main(rest))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``m2l-nlp``; returns the exit code."""
    from m2l_nlp.data.imdb_archive import DataError
    from m2l_nlp.data.pipeline import compilation_cache_dir
    from m2l_nlp.model.classifiers import ModelOutputError
    from m2l_nlp.runs.checkpoint import CheckpointError
    from m2l_nlp.runs.folders import RunFolderError
    from m2l_nlp.runs.predict_input import InputError

    devices.configure_environment(compilation_cache=compilation_cache_dir())  # before JAX
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["grade"]:  # everything after "grade" belongs to the grader and pytest
        return cmd_grade(argv[1:])
    if argv[:1] == ["class"]:  # the instructor's commands: their own parser
        try:
            from m2l_nlp.grading.classroom.commands import main as class_main
        except ModuleNotFoundError as missing:  # a student's handout leaves them out
            if "classroom" not in str(missing):
                raise
            print(
                "error: the class commands are the instructor's: run them from the course's "
                "repository, not a handout",
                file=sys.stderr,
            )
            return 2
        return class_main(argv[1:])
    args = _parser().parse_args(argv)
    args.argv = argv  # for the command that resumes an interrupted run
    try:
        return args.run(args)
    except (DataError, CheckpointError, RunFolderError, InputError, ModelOutputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except FileNotFoundError as error:
        if error.filename is not None:  # the system's: a path given or made that is not there
            print(
                f"error: {error.strerror or error} ({error.filename}): check the path",
                file=sys.stderr,
            )
        else:  # ours, worded (a practical's file, a tokenizer): it says what to do
            print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk, a folder we may not write in, ...
        where = f" ({error.filename})" if error.filename else ""
        print(
            f"error: {error.strerror or error}{where}: free some space or fix the permissions, "
            "or choose other folders with --out / --cache-dir",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(
            "\ninterrupted: files are renamed into place only once complete, so nothing "
            "half-written was left (an older checkpoint or cache stays as it was)",
            file=sys.stderr,
        )
        return 130
    except NotImplementedError as error:
        if getattr(args, "impl", None) != "exercises":
            raise
        print(
            f"error: {error}. --impl exercises runs your own modules: finish the exercises "
            f"first (`pytest` lists what is left){_or_the_reference()}",
            file=sys.stderr,
        )
        return 2
    except Exception as error:
        said = _in_your_code(error, args)
        if said is None:
            raise
        print(f"error: {said}", file=sys.stderr)
        return 2


def _in_your_code(error: Exception, args: argparse.Namespace) -> str | None:
    """An error raised in the student's exercises while training, in the grader's words
    (file, line and its hint, on one line), or None for any other error."""
    import traceback

    from m2l_nlp.grading.checks.runner import describe_error
    from m2l_nlp.impl import repo_root

    if getattr(args, "impl", None) != "exercises":
        return None
    files = {str(p.resolve()) for p in (repo_root() / "exercises").glob("*.py")}
    frames = traceback.extract_tb(error.__traceback__)
    if not any(str(Path(f.filename).resolve()) in files for f in frames):
        return None
    said = describe_error(error, files).replace("\nHint:", " Hint:")
    return f"{said} (`pytest` grades each exercise on its own)"


if __name__ == "__main__":
    sys.exit(main())
