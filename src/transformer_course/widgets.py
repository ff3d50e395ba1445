"""Interactive demos for the lessons, which also render as static figures in the book.

An :class:`Explorer` is a row of controls over a matplotlib figure that redraws when a control moves.
Its display bundle carries, next to the live widget, a PNG of the figure at the default settings: a
live kernel shows the widget, while the book (which has no kernel and does not load widget JavaScript)
renders the PNG. So no page ever shows an empty widget box.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable

import ipywidgets as W
import torch
from matplotlib.figure import Figure

from transformer_course import viz
from transformer_course.attention import scaled_dot_product_attention
from transformer_course.masking import causal_mask, padding_mask


class Explorer(W.VBox):
    """Controls above a figure drawn by ``draw(fig, **values)``; the values are the controls' values.

    ``follow(values)``, when given, returns the settings of controls whose range depends on other controls,
    as ``{control name: {trait: value}}`` (e.g. ``{"valid_len": {"max": values["n"]}}``); they are applied at
    the start and whenever a control moves, before the figure is redrawn once. A slider whose maximum drops
    below its value moves down to it.
    """

    def __init__(self, draw: Callable[..., None], controls: dict[str, W.ValueWidget], *,
                 title: str, figsize: tuple[float, float] = (8, 3),
                 follow: Callable[[dict], dict[str, dict]] | None = None):
        self._draw, self._controls, self._figsize, self.title = draw, controls, figsize, title
        self._follow, self._following = follow, False
        self._apply_follow()
        self._defaults = self.values()
        self._out = W.Output()
        for control in controls.values():
            control.observe(self._changed, names="value")
        super().__init__([W.HTML(f"<b>{title}</b>"), W.HBox(list(controls.values())), self._out])
        self._redraw()

    def values(self) -> dict:
        return {name: control.value for name, control in self._controls.items()}

    def _apply_follow(self) -> None:
        if self._follow is None:
            return
        for name, traits in self._follow(self.values()).items():
            for trait, value in traits.items():
                setattr(self._controls[name], trait, value)

    def _changed(self, _change) -> None:
        if self._following:  # a control that follows another moved: the redraw below covers it
            return
        self._following = True
        try:
            self._apply_follow()
        finally:
            self._following = False
        self._redraw()

    def figure(self, **values) -> Figure:
        """The figure for the given control values (the current ones by default), drawn off-screen."""
        fig = Figure(figsize=self._figsize, layout="constrained")
        self._draw(fig, **{**self.values(), **values})
        return fig

    def _redraw(self) -> None:
        # Set the Output widget's state rather than display() into it: the picture then travels as widget
        # state only, and a kernel without a widget frontend (nbval, nbclient) sees no extra cell output.
        png = _png(self.figure())
        self._out.outputs = ({"output_type": "display_data", "metadata": {},
                              "data": {"image/png": png, "text/plain": self.title}},)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["image/png"] = _png(self.figure(**self._defaults))
        bundle["text/plain"] = f"{self.title} (interactive in Jupyter; the picture shows the default settings)"
        return bundle


def _png(fig: Figure) -> str:
    """A figure as base64-encoded PNG, the form notebook outputs store images in."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


# --- lesson 02: how d_k and the temperature shape the softmax ------------------------------------


def _draw_attention(fig: Figure, d_k: int, temperature: float, n_k: int = 12, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, d_k, generator=g), torch.randn(n_k, d_k, generator=g)
    scores = (q @ k.T).squeeze(0) / temperature
    unscaled, scaled = torch.softmax(scores, -1), torch.softmax(scores / math.sqrt(d_k), -1)
    for i, (weights, name) in enumerate([(unscaled, "q·k (unscaled)"), (scaled, "q·k / sqrt(d_k)")]):
        ax = fig.add_subplot(1, 2, i + 1)
        entropy = -(weights * weights.clamp_min(1e-12).log()).sum()
        viz.weight_bars(weights, ax=ax, title=f"{name}: entropy {entropy:.2f} nats")
        ax.set_xlabel(f"key (d_k = {d_k}, temperature {temperature:g})")


def attention_explorer() -> Explorer:
    """One random query against 12 random keys: softmax weights with and without 1/sqrt(d_k)."""
    controls = {
        "d_k": W.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512], value=64, description="d_k"),
        "temperature": W.FloatLogSlider(value=1.0, base=10, min=-1, max=1, step=0.1, description="temperature"),
    }
    return Explorer(_draw_attention, controls, title="Attention weights of one query as d_k grows")


# --- lesson 03: masks and the weights they leave ---------------------------------------------------

MASK_KINDS = ("causal", "padding", "causal + padding")


def demo_mask(kind: str, n: int, valid_len: int) -> torch.Tensor:
    """The ``(n, n)`` boolean mask of one sequence with ``valid_len`` real tokens (True = may attend)."""
    if kind not in MASK_KINDS:
        raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    padding = padding_mask(torch.tensor([min(valid_len, n)]), n)[0]  # (1, n) broadcasts over queries
    if kind == "causal":
        return causal_mask(n)
    if kind == "padding":
        return padding.expand(n, n)
    return causal_mask(n) & padding


def _draw_mask(fig: Figure, kind: str, n: int, valid_len: int, seed: int = 0) -> None:
    mask = demo_mask(kind, n, valid_len)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    _, weights = scaled_dot_product_attention(x, x, x, mask)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    viz.mask_image(mask, left, title=f"{kind} mask (dark = may attend)")
    viz.heatmap(weights, right, title="attention weights", vmax=1.0)


def mask_explorer() -> Explorer:
    """A mask of the chosen kind for a sequence of n positions, and the weights it leaves; the valid length
    ranges from 0 to n."""
    controls = {
        "kind": W.Dropdown(options=MASK_KINDS, value="causal + padding", description="mask"),
        "n": W.IntSlider(value=8, min=2, max=16, description="n"),
        "valid_len": W.IntSlider(value=5, min=0, max=16, description="valid length"),
    }
    return Explorer(_draw_mask, controls, title="Masks and the attention weights they leave",
                    follow=lambda values: {"valid_len": {"max": values["n"]}})


# --- lesson 04: what each head attends to ---------------------------------------------------------

EXAMPLE_SENTENCE = ("the", "animal", "didn't", "cross", "the", "street", "because", "it", "was", "tired")


def _draw_heads(fig: Figure, num_heads: int, seed: int, d_model: int = 32) -> None:
    from transformer_course.multihead import MultiHeadAttention  # lesson 04's module

    tokens = EXAMPLE_SENTENCE
    g = torch.Generator().manual_seed(100)
    x = 4 * torch.randn(len(tokens), d_model, generator=g)  # stand-in embeddings, fixed across settings
    torch.manual_seed(seed)
    with torch.no_grad():
        _, weights = MultiHeadAttention(d_model, num_heads).eval()(x)  # (h, n, n)
    for i in range(num_heads):
        ax = fig.add_subplot(1, num_heads, i + 1)
        labels = list(tokens) if i == 0 else [""] * len(tokens)
        viz.heatmap(weights[i], ax, title=f"head {i} (d_k = {d_model // num_heads})", row_labels=labels,
                    col_labels=list(tokens), colorbar=False, vmax=float(weights.max()),
                    ylabel="queries" if i == 0 else "")


def head_explorer() -> Explorer:
    """Per-head weights of a randomly initialised multi-head attention over one sentence."""
    controls = {
        "num_heads": W.Dropdown(options=[1, 2, 4, 8], value=4, description="heads h"),
        "seed": W.IntSlider(value=0, min=0, max=9, description="init seed"),
    }
    return Explorer(_draw_heads, controls, title="Each head's attention weights (random initial weights, d = 32)",
                    figsize=(12, 3.6))


# --- lesson 06: the sinusoidal encoding ------------------------------------------------------------


def _draw_positions(fig: Figure, position: int, dimension: int, base: float, n: int = 64, d: int = 32) -> None:
    from transformer_course.positional import sinusoidal_encoding  # lesson 06's module

    pe = sinusoidal_encoding(n, d, base)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    viz.heatmap(pe, left, title=f"PE for n = {n}, d = {d}, base {base:g}", xlabel="dimension",
                ylabel="position", cmap="RdBu", vmin=-1, vmax=1)
    left.axhline(position, color="black", lw=1)
    left.axvline(dimension, color="black", lw=1, ls="--")
    right.plot(pe[:, dimension].numpy(), color="#2b5d8a")
    right.scatter([position], [pe[position, dimension].item()], color="black", zorder=3)
    kind = "sin" if dimension % 2 == 0 else "cos"
    wavelength = 2 * math.pi * base ** ((dimension - dimension % 2) / d)
    right.set(title=f"dimension {dimension} ({kind}, wavelength {wavelength:.1f})", xlabel="position", ylabel="PE",
              ylim=(-1.1, 1.1))
    viz.integer_ticks(right, y=False)


def positional_explorer() -> Explorer:
    """The sinusoidal table with one position and one dimension picked out, and that dimension's wave."""
    controls = {
        "position": W.IntSlider(value=10, min=0, max=63, description="position"),
        "dimension": W.IntSlider(value=6, min=0, max=31, description="dimension"),
        "base": W.FloatLogSlider(value=10000.0, base=10, min=1, max=5, step=0.5, description="base"),
    }
    return Explorer(_draw_positions, controls, title="The sinusoidal positional encoding", figsize=(10, 3.4))


# --- lesson 09: a trained translator's output and cross-attention ------------------------------------


def _draw_translation(fig: Figure, example: str, model, source, target, layer: int) -> None:
    from transformer_course.generation import evaluating, greedy_decode  # lesson 09's decoding
    from transformer_course.multihead import attention_weights

    src = torch.tensor([source.encode(example)])
    out = greedy_decode(model, src, target.bos_id, target.eos_id, max_len=12)
    translation = target.decode(out[0])
    decoder_input = torch.cat([torch.full_like(out[:, :1], target.bos_id), out[:, :-1]], dim=1)  # <bos> + output
    with torch.no_grad(), evaluating(model), attention_weights(model) as weights:
        model(src, decoder_input)
    cross = weights[f"decoder.layers.{layer}.cross_attention"][0]  # (h, n_dec, n_enc)
    rows = ["<bos>", *translation][: cross.shape[1]]
    ax = fig.add_subplot(1, 1, 1)
    viz.heatmap(cross.mean(0), ax, row_labels=rows, col_labels=list(example), xlabel="source characters",
                ylabel="decoder input", title=f"{example!r} -> {translation!r}  (cross-attention, layer {layer}, "
                                               f"mean of {cross.shape[0]} heads)")


def translation_explorer(model, source, target, examples: list[str]) -> Explorer:
    """Pick a human-written date: the model's ISO translation and its cross-attention weights."""
    controls = {
        "example": W.Dropdown(options=list(examples), value=examples[0], description="input"),
        "layer": W.Dropdown(options=list(range(len(model.decoder.layers))), value=len(model.decoder.layers) - 1,
                            description="layer"),
    }

    def draw(fig, example, layer):
        _draw_translation(fig, example, model, source, target, layer)

    return Explorer(draw, controls, title="A trained translator: its output and where it looks", figsize=(9, 4))
