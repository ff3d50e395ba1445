"""Figures and widgets: what they draw is the data they were given, and bad input gets a clear error.

The lessons show these figures (nbval re-runs them); here they are checked directly: the image a heatmap
shows is the matrix, a mask is drawn the same in both of its forms, every explorer's display carries a PNG
of its default settings (what the book shows) and redraws when a control moves.
"""

import base64
import re

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from transformer_course import viz, widgets
from transformer_course.masking import causal_mask, to_additive_mask

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_heatmap_shows_the_matrix_with_its_labels_and_values():
    weights = torch.softmax(torch.randn(3, 4), -1)
    ax = viz.heatmap(weights, row_labels=list("abc"), col_labels=list("wxyz"), annotate=True, title="t")
    np.testing.assert_allclose(ax.images[0].get_array(), weights.numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("abc")
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{v:.2f}" for v in weights.flatten().tolist())
    assert ax.get_title() == "t"


def test_mask_image_draws_boolean_and_additive_masks_alike():
    mask = causal_mask(5)
    boolean, additive = viz.mask_image(mask), viz.mask_image(to_additive_mask(mask))
    np.testing.assert_array_equal(boolean.images[0].get_array(), mask.numpy())
    np.testing.assert_array_equal(additive.images[0].get_array(), boolean.images[0].get_array())


def test_heatmaps_share_one_colour_scale_and_hide_spare_axes():
    matrices = torch.rand(5, 3, 3) * torch.arange(1, 6).view(5, 1, 1)
    fig = viz.heatmaps(matrices, titles=[f"head {i}" for i in range(5)], ncols=3)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 5 and {im.get_clim() for im in images} == {(0.0, float(matrices.max()))}
    assert [ax.get_title() for ax in fig.axes if ax.images] == [f"head {i}" for i in range(5)]


def test_weight_bars_and_diagrams_draw():
    ax = viz.weight_bars(torch.tensor([0.1, 0.6, 0.3]), labels=["a", "b", "c"])
    assert [p.get_height() for p in ax.patches] == pytest.approx([0.1, 0.6, 0.3])
    pre, post = viz.block_diagram(norm_first=True), viz.block_diagram()
    assert "pre-norm" in pre.get_title() and "post-norm" in post.get_title()
    for kind, stacks in [("encoder-decoder", 2), ("decoder-only", 1), ("encoder-only", 1)]:
        ax = viz.stack_diagram(kind=kind, num_layers=3)
        assert sum("#3" in t.get_text() for t in ax.texts) == stacks


def _texts(fig_or_ax) -> list[str]:
    axes = fig_or_ax.axes if isinstance(fig_or_ax, Figure) else [fig_or_ax]
    return [t.get_text() for ax in axes for t in [*ax.texts, ax.title]]


def test_architecture_map_draws_both_stacks_with_the_lesson_of_each_part():
    fig = viz.architecture_map()
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    texts = "\n".join(_texts(fig))
    for title in ["encoder-decoder", "decoder-only"]:
        assert title in texts, title
    for part, lessons in [("token embedding + positions", "lessons 1, 6"),
                          ("masked multi-head self-attention", "lessons 2, 3 (mask), 4 (heads)"),
                          ("multi-head self-attention", "lessons 2 (attention), 4 (heads)"),
                          ("cross-attention to the memory", "lesson 5"),
                          ("residual + LayerNorm, feed-forward", "lesson 7"),
                          ("linear head -> logits (B, n, |V|)", "lessons 1, 8"),
                          ("training: predict the next target token", "lesson 9"),
                          ("generation: sample a token, append it", "lesson 10")]:
        assert f"{part}\n{lessons}" in texts, part
    assert texts.count("x L blocks\nlesson 8") == 3  # the encoder, the decoder and the decoder-only stack
    lesson_lines = [line for line in texts.split("\n") if line.startswith("lesson")]
    assert {int(number) for line in lesson_lines for number in re.findall(r"\d+", line)} == set(range(1, 11))


def test_architecture_map_without_lessons_and_with_a_number_of_layers():
    texts = _texts(viz.architecture_map(num_layers=6, lessons=False))
    assert not any("lesson" in t for t in texts)
    assert texts.count("x 6 blocks") == 3 and "token embedding + positions" in texts


def test_multihead_diagram_shows_the_shapes_of_its_sizes():
    ax = viz.multihead_diagram(d_model=12, num_heads=3)
    assert isinstance(ax.figure, Figure)
    texts = _texts(ax)
    assert texts.count("(B, n, 12)") >= 4 and texts.count("(B, 3, n, 4)") >= 2  # d_h = 12 / 3 per head
    assert "weights\n(B, 3, n, n)" in texts and "x  (B, n, 12)" in texts
    for step in ["$W_q$  (12 x 12)", "$W_k$  (12 x 12)", "$W_v$  (12 x 12)", "Q: split into 3 heads",
                 "K: split into 3 heads", "V: split into 3 heads", "concatenate the heads", "$W_o$  (12 x 12)"]:
        assert step in texts, step
    assert any("\\sqrt{4}" in t for t in texts)  # each head scales by 1 / sqrt(d_h)
    assert "d = 12, h = 3, $d_h = d / h$ = 4" in ax.get_title()


def test_multihead_diagram_draws_the_lessons_own_batch_and_length():
    ax = viz.multihead_diagram(d_model=24, num_heads=4, batch_size=2, seq_len=10)
    texts = _texts(ax)
    assert "(2, 10, 24)" in texts and "(2, 4, 10, 6)" in texts and "weights\n(2, 4, 10, 10)" in texts
    assert "(B, n, 24)" not in texts and "B = 2, n = 10" in ax.get_title()


def test_logo_is_a_square_png(tmp_path):
    viz.draw_logo(str(tmp_path / "logo.png"), size_px=64)
    data = (tmp_path / "logo.png").read_bytes()
    assert data.startswith(PNG) and plt.imread(tmp_path / "logo.png").shape[:2] == (64, 64)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: viz.heatmap(torch.rand(2, 3, 4)), ValueError, r"matrix must be a 2-D matrix \(n_q, n_k\), got shape"),
        (lambda: viz.heatmap(torch.rand(3, 4), row_labels=["a"]), ValueError,
         r"row_labels must have one label per row of the \(3, 4\) matrix \(3\), got 1"),
        (lambda: viz.mask_image(causal_mask(3), col_labels=list("abcd")), ValueError,
         r"col_labels must have one label per column of the \(3, 3\) matrix \(3\), got 4"),
        (lambda: viz.heatmaps([]), ValueError, "at least one matrix"),
        (lambda: viz.heatmaps(torch.rand(2, 3, 3), titles=["one"]), ValueError, r"one title per matrix \(2\), got 1"),
        (lambda: viz.weight_bars(torch.rand(2, 2)), ValueError, r"weights must be a vector \(n_k,\)"),
        (lambda: viz.weight_bars(torch.rand(3), labels=["a"]), ValueError, r"one entry per weight \(3\), got 1"),
        (lambda: viz.stack_diagram(kind="gpt"), ValueError, "kind must be one of"),
        (lambda: viz.stack_diagram(num_layers=0), ValueError, "num_layers must be >= 1, got 0"),
        (lambda: widgets.demo_mask("diagonal", 4, 2), ValueError, "kind must be one of"),
        (lambda: viz.multihead_diagram(d_model=10, num_heads=4), ValueError,
         "d_model=10 must be divisible by num_heads=4"),
        (lambda: viz.multihead_diagram(num_heads=0), ValueError, "num_heads must be >= 1, got 0"),
        (lambda: viz.multihead_diagram(d_model=8.0), TypeError, "d_model must be an integer, got float"),
        (lambda: viz.multihead_diagram(seq_len=0), ValueError, "seq_len must be >= 1, got 0"),
        (lambda: viz.multihead_diagram(batch_size="B"), TypeError, "batch_size must be an integer, got str"),
        (lambda: viz.architecture_map(num_layers=0), ValueError, "num_layers must be >= 1, got 0"),
        (lambda: viz.architecture_map(lessons="yes"), TypeError, "lessons must be True or False, got str"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("kind, expected", [
    ("causal", causal_mask(4)),
    ("padding", torch.tensor([True, True, False, False]).expand(4, 4)),
    ("causal + padding", causal_mask(4) & torch.tensor([True, True, False, False])),
])
def test_demo_masks(kind, expected):
    assert torch.equal(widgets.demo_mask(kind, 4, 2), expected)


@pytest.mark.parametrize("make", [widgets.attention_explorer, widgets.mask_explorer, widgets.head_explorer,
                                  widgets.positional_explorer])
def test_explorers_carry_a_png_of_their_defaults_and_redraw(make):
    explorer = make()
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]).startswith(PNG)
    assert "interactive in Jupyter" in bundle["text/plain"]
    before = explorer._out.outputs[0]["data"]["image/png"]
    control = next(iter(explorer._controls.values()))
    options = getattr(control, "options", None)
    control.value = options[0] if options else control.min  # move the first control to one end
    assert explorer._out.outputs[0]["data"]["image/png"] != before
    assert explorer._repr_mimebundle_()["image/png"] == bundle["image/png"]  # the book's picture: the defaults


def test_the_valid_length_follows_n_and_the_figure_is_redrawn_once():
    explorer = widgets.mask_explorer()
    n, valid_len = explorer._controls["n"], explorer._controls["valid_len"]
    assert (n.value, valid_len.value, valid_len.max) == (8, 5, 8)  # at most n real tokens from the start
    draws = []
    explorer._draw = lambda fig, **values: (draws.append(values), widgets._draw_mask(fig, **values))
    n.value = 4
    assert (valid_len.value, valid_len.max) == (4, 4)  # the slider moved down with its maximum
    assert draws == [{"kind": "causal + padding", "n": 4, "valid_len": 4}]  # one redraw, with the followed value
    n.value = 16
    assert (valid_len.value, valid_len.max) == (4, 16)


def _tick_values(ax):
    return [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]], \
        [t for t in ax.get_yticks() if min(ax.get_ylim()) <= t <= max(ax.get_ylim())]


def test_explorer_axes_of_positions_have_whole_ticks():
    explorer = widgets.mask_explorer()
    for n in (2, 4, 11):  # at n = 4, matplotlib alone puts y ticks at -0.5, 0.0, 0.5, ...
        fig = explorer.figure(n=n, valid_len=min(5, n))
        fig.canvas.draw()
        for ax in fig.axes[:2]:  # the mask and the weights (not the colour bar)
            xs, ys = _tick_values(ax)
            assert xs and ys and all(float(t).is_integer() for t in xs + ys), (n, xs, ys)
    fig = widgets.positional_explorer().figure()
    fig.canvas.draw()
    heat, wave = fig.axes[0], fig.axes[-1]
    assert all(float(t).is_integer() for t in _tick_values(heat)[0] + _tick_values(heat)[1] + _tick_values(wave)[0])


def test_integer_ticks_keep_labels():
    ax = viz.heatmap(torch.eye(3), row_labels=["a", "b", "c"])
    viz.integer_ticks(ax)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    plt.close(ax.figure)


@pytest.mark.parametrize("draw", [viz.heatmap, viz.mask_image], ids=["heatmap", "mask_image"])
@pytest.mark.parametrize("n", [2, 4, 7])
def test_static_matrices_tick_whole_positions(draw, n):
    ax = draw(torch.ones(n, n + 1, dtype=torch.bool) if draw is viz.mask_image else torch.rand(n, n + 1))
    ax.figure.canvas.draw()
    xs, ys = _tick_values(ax)
    assert xs and ys and all(float(t).is_integer() for t in xs + ys), (n, xs, ys)
    plt.close(ax.figure)
