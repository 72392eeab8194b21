"""Checks shared by the practicals' stacks of blocks (practical 2's ``TransformerEncoder``,
practical 3's ``TransformerDecoder``): a stack applies its blocks in order, each to the
previous one's output, gives one attention map per block, and adds no dropout of its own."""

from __future__ import annotations

from typing import Any

from m2l_nlp.grading.checks import tools

# the hint of a stack's evaluation check (tools.WithDropout.expect_evaluation_matches)
IN_ORDER = "Apply every block in order, each to the previous block's output, with the mask."
# the hint of a stack's training-mode check (tools.WithDropout.expect_trains_like)
NO_DROPOUT_OF_ITS_OWN = "Every block gets is_train; the stack adds no dropout of its own."


def expect_attention_maps(
    ctx: Any, outputs: tools.BuildSpec, maps: tools.BuildSpec, layers: int, *args: Any
) -> None:
    """``get_attention_maps`` (the build ``maps``) returns one map per block, each the
    reference's, with the perturbed parameters of the stack's forward (the build ``outputs``)."""
    params = tools.perturb(tools.run_haiku(outputs, ctx.ref, None, *args), ctx.rng("params"))
    want = tools.run_haiku(maps, ctx.ref, params, *args)
    got = tools.run_haiku(maps, ctx.student, params, *args)
    if not isinstance(got, list | tuple) or len(got) != layers:
        found = f"a list of {len(got)} items" if isinstance(got, list) else tools.kind_of(got)
        tools.fail(
            f"get_attention_maps of {layers} blocks should return a list of {layers} maps, one "
            f"per block; yours returned {found}"
        )
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        tools.expect_close(
            g,
            w,
            f"the attention map of block {i}",
            hint="Each block reads the previous block's output, as in __call__.",
        )
