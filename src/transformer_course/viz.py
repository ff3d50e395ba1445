"""Plotting helpers for the lessons: attention heatmaps, masks, bar charts of one query's weights, and
diagrams of the architecture (a block, stacks, multi-head attention, the map of the whole course).

A single-panel function draws on a matplotlib ``Axes`` (a new figure when none is given) and returns it, so a
lesson can compose panels with ``plt.subplots`` and the widgets can redraw into their own figures; the
multi-panel ones (``heatmaps``, ``architecture_map``) make their own figure and return the ``Figure``.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch
from matplotlib.ticker import FixedLocator, MaxNLocator

from transformer_course import _validate

# Blocked cells light grey, allowed cells dark blue: reads the same in colour and in greyscale print.
MASK_CMAP = ListedColormap(["#e6e6e6", "#2b5d8a"])


def _matrix(name: str, values) -> torch.Tensor:
    values = torch.as_tensor(values) if not isinstance(values, torch.Tensor) else values
    values = values.detach().cpu()
    if values.dim() != 2:
        raise ValueError(f"{name} must be a 2-D matrix (n_q, n_k), got shape {tuple(values.shape)}")
    return values


def _axes(ax: Axes | None, size: tuple[float, float] = (4, 3.5)) -> Axes:
    return ax if ax is not None else plt.subplots(figsize=size)[1]


def _check_labels(shape, row_labels, col_labels) -> None:
    for name, labels, size, what in (("row_labels", row_labels, shape[0], "row"),
                                     ("col_labels", col_labels, shape[1], "column")):
        if labels is not None and len(labels) != size:
            raise ValueError(f"{name} must have one label per {what} of the {tuple(shape)} matrix ({size}), "
                             f"got {len(labels)}")


def _label_axes(ax, row_labels, col_labels, xlabel, ylabel, title):
    if col_labels is not None:
        ax.set_xticks(range(len(col_labels)), col_labels, rotation=90 if len(col_labels) > 6 else 0)
    if row_labels is not None:
        ax.set_yticks(range(len(row_labels)), row_labels)
    integer_ticks(ax)  # rows and columns are positions: no tick at -0.5
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)


def integer_ticks(ax: Axes, *, x: bool = True, y: bool = True) -> Axes:
    """Ticks at whole numbers only on the chosen axes (positions, indices): a 4 x 4 matrix gets 0, 1, 2, 3, not
    -0.5, 0.0, 0.5, ... Labelled ticks (``row_labels``, ``col_labels``) stay as they are."""
    for use, axis in ((x, ax.xaxis), (y, ax.yaxis)):
        if use and not isinstance(axis.get_major_locator(), FixedLocator):  # labelled or placed by hand
            # matplotlib's AutoLocator, restricted to whole numbers: where its ticks were whole, they stay the same
            axis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10], integer=True))
    return ax


def heatmap(
    matrix,
    ax: Axes | None = None,
    *,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    title: str | None = None,
    xlabel: str = "keys",
    ylabel: str = "queries",
    cmap: str = "Reds",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    colorbar: bool = True,
    annotate: bool = False,
) -> Axes:
    """Draw an ``(n_q, n_k)`` matrix (attention weights by default: rows are queries, columns keys)."""
    values = _matrix("matrix", matrix).float()
    _check_labels(values.shape, row_labels, col_labels)
    ax = _axes(ax)
    image = ax.imshow(values.numpy(), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    _label_axes(ax, row_labels, col_labels, xlabel, ylabel, title)
    if annotate:
        low, high = image.get_clim()  # the colour scale's range, so the text contrasts with the cell colour
        threshold = (low + high) / 2
        for (i, j), v in zip(torch.cartesian_prod(*map(torch.arange, values.shape)).tolist(), values.flatten(),
                             strict=True):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if v > threshold else "black")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def mask_image(
    mask,
    ax: Axes | None = None,
    *,
    title: str | None = None,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
) -> Axes:
    """Draw a boolean ``(n_q, n_k)`` mask: dark where attention is allowed, light where it is blocked.

    An additive mask (0 / -inf) is drawn the same way: allowed where it is above -inf.
    """
    mask = _matrix("mask", mask)
    _check_labels(mask.shape, row_labels, col_labels)
    allowed = mask if mask.dtype == torch.bool else mask > float("-inf")
    ax = _axes(ax)
    ax.imshow(allowed.numpy(), cmap=MASK_CMAP, vmin=0, vmax=1, aspect="auto")
    _label_axes(ax, row_labels, col_labels, "keys", "queries", title)
    return ax


def heatmaps(
    matrices,
    *,
    titles: Sequence[str] | None = None,
    ncols: int | None = None,
    size: float = 2.6,
    suptitle: str | None = None,
    **heatmap_kwargs,
) -> Figure:
    """A grid of heatmaps sharing one colour scale, e.g. the weights of each head ``(h, n_q, n_k)``."""
    matrices = [_matrix(f"matrices[{i}]", m).float() for i, m in enumerate(matrices)]
    if not matrices:
        raise ValueError("matrices must hold at least one matrix, got none")
    if titles is not None and len(titles) != len(matrices):
        raise ValueError(f"titles must have one title per matrix ({len(matrices)}), got {len(titles)}")
    ncols = _validate.integer("ncols", ncols if ncols is not None else min(len(matrices), 4), minimum=1)
    nrows = -(-len(matrices) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols + 0.8, size * nrows), squeeze=False,
                             layout="constrained")
    heatmap_kwargs.setdefault("vmax", max(float(m.max()) for m in matrices))
    for i, ax in enumerate(axes.flat):
        if i >= len(matrices):
            ax.axis("off")
            continue
        heatmap(matrices[i], ax, title=titles[i] if titles else None, colorbar=False, **heatmap_kwargs)
    image = axes.flat[0].images[0]
    fig.colorbar(image, ax=axes, fraction=0.02, pad=0.02)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def weight_bars(
    weights,
    labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    *,
    title: str | None = None,
    color: str = "#b2182b",
) -> Axes:
    """Bar chart of one query's attention weights over its keys (a vector of ``n_k`` weights)."""
    weights = torch.as_tensor(weights).detach().cpu().float()
    if weights.dim() != 1:
        raise ValueError(f"weights must be a vector (n_k,), got shape {tuple(weights.shape)}")
    if labels is not None and len(labels) != len(weights):
        raise ValueError(f"labels must have one entry per weight ({len(weights)}), got {len(labels)}")
    ax = _axes(ax, (6, 2.5))
    positions = range(len(weights))
    ax.bar(positions, weights.numpy(), color=color)
    ax.set_xticks(positions, labels if labels is not None else [str(i) for i in positions],
                  rotation=45 if labels is not None else 0, ha="right" if labels is not None else "center")
    ax.set_ylim(0, max(1.0, float(weights.max()) * 1.05))
    ax.set_ylabel("weight")
    if title:
        ax.set_title(title)
    return ax


def block_diagram(ax: Axes | None = None, *, norm_first: bool = False, title: str | None = None) -> Axes:
    """Draw an encoder block as boxes and arrows: post-norm (2017) or pre-norm (``norm_first=True``).

    The residual paths are drawn beside the main path, so the one difference between the two designs,
    where the LayerNorm sits relative to the sum, is visible at a glance.
    """
    steps = (["LayerNorm", "Multi-head attention", "+", "LayerNorm", "Feed-forward", "+"] if norm_first
             else ["Multi-head attention", "+", "LayerNorm", "Feed-forward", "+", "LayerNorm"])
    ax = _axes(ax, (3, 5))
    ys = [i + 1.0 for i in range(len(steps))]
    colours = {"LayerNorm": "#f2d16b", "+": "#ffffff", "Multi-head attention": "#f4a582", "Feed-forward": "#92c5de"}
    ax.annotate("", xy=(0, ys[0] - 0.3), xytext=(0, 0.0), arrowprops=dict(arrowstyle="->"))
    ax.text(0, -0.25, "x", ha="center", va="top")
    for i, (y, label) in enumerate(zip(ys, steps, strict=True)):
        shape = "circle" if label == "+" else "round,pad=0.3"
        ax.text(0, y, label, ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle=shape, fc=colours[label], ec="black"))
        if i + 1 < len(steps):
            ax.annotate("", xy=(0, ys[i + 1] - 0.3), xytext=(0, y + 0.3), arrowprops=dict(arrowstyle="->"))
    # Residual paths: from the input of each sub-layer group, around it on the right, into its "+".
    plus = [ys[i] for i, label in enumerate(steps) if label == "+"]
    for start, y_plus in zip([0.55, ys[2] + 0.5], plus, strict=True):
        ax.plot([0, 1.1, 1.1], [start, start, y_plus], color="#555555", lw=1)
        ax.annotate("", xy=(0.13, y_plus), xytext=(1.1, y_plus), arrowprops=dict(arrowstyle="->", color="#555555"))
    ax.annotate("", xy=(0, ys[-1] + 0.8), xytext=(0, ys[-1] + 0.3), arrowprops=dict(arrowstyle="->"))
    ax.set(xlim=(-1.6, 1.6), ylim=(-0.6, ys[-1] + 1.0))
    ax.axis("off")
    ax.set_title(title or ("pre-norm: x + f(norm(x))" if norm_first else "post-norm (2017): norm(x + f(x))"))
    return ax


def stack_diagram(ax: Axes | None = None, *, kind: str = "encoder-decoder", num_layers: int = 2) -> Axes:
    """Draw a model as stacks of blocks: ``"encoder-decoder"``, ``"decoder-only"`` or ``"encoder-only"``.

    Each column runs bottom to top: token ids, embedding + positions, ``num_layers`` blocks, and the head.
    In the encoder-decoder, an arrow from the top of the encoder enters every decoder block (cross-attention).
    """
    kinds = {"encoder-decoder": ["encoder", "decoder"], "decoder-only": ["decoder-only"],
             "encoder-only": ["encoder"]}
    if kind not in kinds:
        raise ValueError(f"kind must be one of {sorted(kinds)}, got {kind!r}")
    num_layers = _validate.integer("num_layers", num_layers, minimum=1)
    ax = _axes(ax, (2.6 * len(kinds[kind]) + 1, 4.5))
    fill = {"encoder": "#92c5de", "decoder": "#f4a582", "decoder-only": "#f4a582"}
    label = {"encoder": "encoder block\n(self-attn, FFN)",
             "decoder": "decoder block\n(masked self-attn,\ncross-attn, FFN)",
             "decoder-only": "block\n(masked self-attn, FFN)"}
    tops, gap = {}, 1.5
    for col, stack in enumerate(kinds[kind]):
        x = col * 2.6
        bottom = "source ids" if stack == "encoder" and kind == "encoder-decoder" else "token ids"
        ax.text(x, 0, bottom, ha="center", va="center", fontsize=9)
        ax.text(x, 1, "embedding + positions", ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round,pad=0.3", fc="#eeeeee", ec="black"))
        ys = [2.3 + gap * i for i in range(num_layers)]
        for start, end in [(0.25, 0.75), (1.3, ys[0] - 0.45)] + [(y + 0.45, y + gap - 0.45) for y in ys[:-1]]:
            ax.annotate("", xy=(x, end), xytext=(x, start), arrowprops=dict(arrowstyle="->"))
        for i, y in enumerate(ys):
            ax.text(x, y, f"{label[stack]}  #{i + 1}", ha="center", va="center", fontsize=7.5,
                    bbox=dict(boxstyle="round,pad=0.35", fc=fill[stack], ec="black"))
        tops[stack] = ys[-1]
        if not (stack == "encoder" and kind == "encoder-decoder"):
            head = ys[-1] + gap
            ax.annotate("", xy=(x, head - 0.3), xytext=(x, ys[-1] + 0.45), arrowprops=dict(arrowstyle="->"))
            ax.text(x, head, "linear head -> logits (B, n, |V|)", ha="center", va="center", fontsize=8,
                    bbox=dict(boxstyle="round,pad=0.3", fc="#f2d16b", ec="black"))
    if kind == "encoder-decoder":
        memory_y = tops["encoder"] + 0.8
        ax.plot([0, 0, 1.3], [tops["encoder"] + 0.45, memory_y, memory_y], color="#555555")
        for y in [2.3 + gap * i for i in range(num_layers)]:
            ax.annotate("", xy=(2.6 - 0.95, y), xytext=(1.3, y), arrowprops=dict(arrowstyle="->", color="#555555"))
        ax.plot([1.3, 1.3], [2.3, memory_y], color="#555555")
        ax.text(0.1, memory_y + 0.12, "memory", ha="left", va="bottom", fontsize=8, color="#555555")
    ax.set(xlim=(-1.4, 2.6 * (len(kinds[kind]) - 1) + 1.4), ylim=(-0.5, 2.3 + gap * num_layers + 0.6))
    ax.axis("off")
    ax.set_title(kind)
    return ax


_MAP_FILL = {"embed": "#eeeeee", "self": "#f4a582", "cross": "#b2abd2", "ffn": "#92c5de", "head": "#f2d16b",
             "use": "#ffffff"}


# The map is read in the book's text column, 784 px wide: drawn 7.8 inches wide, its PNG (100 dpi) is shown at
# its own size, so a label of F points is F * 100 / 72 px high; 9 points gives 12.5 px.
_MAP_WIDTH_IN, _MAP_FONT = 7.8, 9.0


def architecture_map(*, num_layers: int | None = None, lessons: bool = True,
                     figsize: tuple[float, float] | None = None) -> Figure:
    """The whole transformer as a map of the course: the encoder-decoder (top) and the decoder-only stack
    (bottom), each bottom to top, every part labelled with the lessons that build it: embedding and positions 1
    and 6, attention 2, masks 3, heads 4, cross-attention 5, residual + LayerNorm + feed-forward 7, stacking and
    the output head 8, training 9, generation 10.

    ``num_layers`` is the number of stacked blocks written beside each frame (the symbol L when ``None``);
    ``lessons=False`` draws the parts without their lessons. ``figsize`` defaults to the size whose labels are
    readable in the book's text column. Returns the new figure.
    """
    if num_layers is not None:
        num_layers = _validate.integer("num_layers", num_layers, minimum=1)
    if not isinstance(lessons, bool):
        raise TypeError(f"lessons must be True or False, got {_validate.describe(lessons)}")
    L = "L" if num_layers is None else str(num_layers)
    half = 0.3 if lessons else 0.18  # half the height of a box: two lines of text with the lessons, one without
    font = _MAP_FONT
    embed_y, pitch = 0.85, 1.08  # the embedding's height; from one part of a block to the next

    def layout(n_parts):
        # Heights of a column of n_parts in a frame: the parts, the frame, the head and the box above the head.
        ys = [embed_y + 2 * half + 0.65 + pitch * i for i in range(n_parts)]
        bottom, top = ys[0] - half - 0.3, ys[-1] + half + 0.3
        head_y = top + 0.42 + half
        return ys, bottom, top, head_y, head_y + 0.55 + 2 * half

    def box(ax, x, y, text, where, fill):
        label = f"{text}\n{where}" if lessons else text
        ax.text(x, y, label, ha="center", va="center", fontsize=font, linespacing=1.35,
                bbox=dict(boxstyle="round,pad=0.3", fc=_MAP_FILL[fill], ec="black"))

    def arrow(ax, x0, y0, x1, y1, **style):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", **style))

    def column(ax, x, ids, parts, width, side):
        # ids -> embedding -> a frame of parts (bottom to top); returns the parts' heights and the frame's top.
        ax.text(x, 0, ids, ha="center", va="center", fontsize=font)
        box(ax, x, embed_y, "token embedding + positions", "lessons 1, 6", "embed")
        arrow(ax, x, 0.2, x, embed_y - half - 0.08)
        ys, bottom, top, _, _ = layout(len(parts))
        ax.add_patch(FancyBboxPatch((x - width / 2, bottom), width, top - bottom, boxstyle="round,pad=0.05",
                                    fc="#f7f7f7", ec="#555555", ls="--", zorder=0))
        stacked = f"x {L} blocks" + ("\nlesson 8" if lessons else "")
        edge = x - width / 2 - 0.12 if side == "left" else x + width / 2 + 0.12
        ax.text(edge, (bottom + top) / 2, stacked, ha="right" if side == "left" else "left", va="center",
                fontsize=font, fontweight="bold", linespacing=1.35)
        arrow(ax, x, embed_y + half + 0.08, x, ys[0] - half - 0.08)
        for i, (y, (text, where, fill)) in enumerate(zip(ys, parts, strict=True)):
            box(ax, x, y, text, where, fill)
            if i + 1 < len(parts):
                arrow(ax, x, y + half + 0.08, x, ys[i + 1] - half - 0.08)
        return ys, top

    def on_top(ax, x, y_from, y, text, where, fill):
        arrow(ax, x, y_from, x, y - half - 0.08)
        box(ax, x, y, text, where, fill)
        return y

    attention, masked = "lessons 2 (attention), 4 (heads)", "lessons 2, 3 (mask), 4 (heads)"
    ffn = ("residual + LayerNorm, feed-forward", "lesson 7", "ffn")
    head = ("linear head -> logits (B, n, |V|)", "lessons 1, 8", "head")
    width = 3.9  # of a frame, in data units: the widest label with its box

    # The two panels share one scale (data units per inch), so their boxes and labels are the same size.
    # Encoder-decoder: the encoder on the left, the decoder on the right, the memory between them.
    xlim = (-3.4, 8.7)
    dec_x = 5.3
    ylims = [(-0.35, layout(n_parts)[-1] + half + 0.2) for n_parts in (3, 2)]  # up to the box over the head
    heights = [hi - lo + 0.7 for lo, hi in ylims]  # + the panel's title
    if figsize is None:
        figsize = (_MAP_WIDTH_IN, _MAP_WIDTH_IN / (xlim[1] - xlim[0]) * sum(heights))
    fig, (top_ax, bottom_ax) = plt.subplots(2, 1, figsize=figsize, height_ratios=heights, layout="constrained")

    _, enc_top = column(top_ax, 0, "source ids (B, n_enc)",
                        [("multi-head self-attention", attention, "self"), ffn], width, "left")
    dec_ys, dec_top = column(top_ax, dec_x, "target ids, shifted right (B, n_dec)",
                             [("masked multi-head self-attention", masked, "self"),
                              ("cross-attention to the memory", "lesson 5", "cross"), ffn],
                             width, "right")
    memory_y = enc_top + 0.45
    bend = (width / 2 + dec_x - width / 2) / 2  # halfway between the two frames
    top_ax.plot([0, 0, bend, bend], [enc_top, memory_y, memory_y, dec_ys[1]], color="#555555")
    arrow(top_ax, bend, dec_ys[1], dec_x - width / 2 + 0.05, dec_ys[1], color="#555555")
    top_ax.text(0.1, memory_y + 0.06, "memory (B, n_enc, d)", ha="left", va="bottom", fontsize=font,
                color="#555555")
    _, _, _, head_y, use_y = layout(3)
    on_top(top_ax, dec_x, dec_top, head_y, *head)
    on_top(top_ax, dec_x, head_y + half + 0.08, use_y, "training: predict the next target token", "lesson 9", "use")
    top_ax.set(xlim=xlim, ylim=ylims[0])
    top_ax.set_title("encoder-decoder (the 2017 transformer), e.g. translation", fontsize=font + 1.5)

    # Decoder-only: one stack; generation feeds every new token back in at the bottom.
    lm_x = 2.6
    _, lm_top = column(bottom_ax, lm_x, "token ids (B, n)",
                       [("masked multi-head self-attention", masked, "self"), ffn], width, "left")
    _, _, _, head_y, use_y = layout(2)
    on_top(bottom_ax, lm_x, lm_top, head_y, *head)
    gen_y = on_top(bottom_ax, lm_x, head_y + half + 0.08, use_y, "generation: sample a token, append it",
                   "lesson 10", "use")
    loop_x = lm_x + width / 2 + 0.5
    bottom_ax.plot([lm_x + width / 2 + 0.05, loop_x, loop_x], [gen_y, gen_y, 0], color="#555555", ls=":")
    arrow(bottom_ax, loop_x, 0, lm_x + 1.1, 0, color="#555555", ls=":")
    bottom_ax.set(xlim=xlim, ylim=ylims[1])
    bottom_ax.set_title("decoder-only (GPT-style language models)", fontsize=font + 1.5)
    for ax in (top_ax, bottom_ax):
        ax.axis("off")
    return fig


def multihead_diagram(ax: Axes | None = None, *, d_model: int = 512, num_heads: int = 8,
                      batch_size: int | None = None, seq_len: int | None = None) -> Axes:
    """Draw multi-head attention as a flow, bottom to top, with the tensor shapes on the arrows: the input
    (B, n, d), the projections W_q, W_k, W_v, the split into h heads of width d_h = d / h (the paper's d_k),
    scaled dot-product attention in every head, the concatenation back to (B, n, d) and the output projection
    W_o. The shapes use ``d_model`` and ``num_heads``, and ``batch_size`` and ``seq_len`` where given (the
    symbols B and n otherwise)."""
    d_model, num_heads, _ = _validate.heads(d_model, num_heads)
    B = "B" if batch_size is None else str(_validate.integer("batch_size", batch_size, minimum=1))
    n = "n" if seq_len is None else str(_validate.integer("seq_len", seq_len, minimum=1))
    d_h = d_model // num_heads
    ax = _axes(ax, (7, 5.5))
    box = dict(boxstyle="round,pad=0.35", ec="black")
    full, heads, weights = f"({B}, {n}, {d_model})", f"({B}, {num_heads}, {n}, {d_h})", f"({B}, {num_heads}, {n}, {n})"

    def arrow(x0, y0, x1, y1, shape=""):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->"))
        if shape:
            ax.text((x0 + x1) / 2 + 0.08, (y0 + y1) / 2, shape, ha="left", va="center", fontsize=7, color="#444444")

    ax.text(0, 0, f"x  {full}", ha="center", va="center", fontsize=9)
    for x, name in [(-2.2, "Q"), (0, "K"), (2.2, "V")]:
        arrow(0, 0.25, x, 1.05)
        ax.text(x, 1.35, f"$W_{name.lower()}$  ({d_model} x {d_model})", ha="center", va="center", fontsize=8,
                bbox={**box, "fc": "#f4a582"})
        arrow(x, 1.65, x, 2.45, full)
        ax.text(x, 2.75, f"{name}: split into {num_heads} heads", ha="center", va="center", fontsize=8,
                bbox={**box, "fc": "#eeeeee"})
        arrow(x, 3.05, x * 0.25, 3.8, heads if name == "K" else "")  # Q and V: the same shape
    ax.text(0, 4.2, f"scaled dot-product attention in each head\nsoftmax($QK^T / \\sqrt{{{d_h}}}$) V",
            ha="center", va="center", fontsize=8, bbox={**box, "fc": "#92c5de"})
    ax.text(1.75, 4.2, f"weights\n{weights}", ha="left", va="center", fontsize=7, color="#444444")
    arrow(0, 4.6, 0, 5.35, heads)
    ax.text(0, 5.65, "concatenate the heads", ha="center", va="center", fontsize=8, bbox={**box, "fc": "#eeeeee"})
    arrow(0, 5.95, 0, 6.75, full)
    ax.text(0, 7.05, f"$W_o$  ({d_model} x {d_model})", ha="center", va="center", fontsize=8,
            bbox={**box, "fc": "#f2d16b"})
    arrow(0, 7.35, 0, 8.05, full)
    ax.text(0, 8.3, "output", ha="center", va="center", fontsize=9)
    ax.set(xlim=(-3.4, 3.4), ylim=(-0.4, 8.7))
    ax.axis("off")
    sizes = "".join(f"{symbol} = {value}, " for symbol, value in (("B", B), ("n", n)) if value != symbol)
    ax.set_title(f"Multi-head attention for {sizes}d = {d_model}, h = {num_heads}, $d_h = d / h$ = {d_h}\n"
                 "shapes (B, n, d) and, per head, (B, h, n, $d_h$)", fontsize=10)
    return ax


def draw_logo(path: str, size_px: int = 256) -> None:
    """The book's logo: the causal attention weights of a short sentence, computed, not drawn by hand."""
    from matplotlib.figure import Figure

    from transformer_course.attention import scaled_dot_product_attention
    from transformer_course.masking import causal_mask

    g = torch.Generator().manual_seed(2017)
    q, k = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    _, weights = scaled_dot_product_attention(q, k, k, causal_mask(8))
    fig = Figure(figsize=(2, 2), dpi=size_px / 2)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.imshow(weights.numpy(), cmap="Reds", vmin=0, vmax=1)
    ax.axis("off")
    fig.savefig(path, transparent=True)
