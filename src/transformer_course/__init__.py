"""The reference package of the transformer course: one module per idea, imported by the lessons.

- ``attention``, ``masking``: scaled dot-product attention, masked softmax, causal and padding masks.
- ``multihead``: multi-head attention (and grouped-query attention, rotary positions, the KV cache).
- ``positional``: sinusoidal, learned and rotary position information.
- ``blocks``, ``models``: the FFN, norms, encoder and decoder blocks, stacks, seq2seq and decoder-only models.
- ``probes``: measurements that look inside a model (does a position's output depend on later tokens?).
- ``data``, ``training``, ``generation``: synthetic tasks and the Shakespeare corpus, the training loop,
  decoding and sampling.
- ``tokenization``, ``bpe``, ``baselines``: the lessons' tokenizers, a byte-pair encoder written to be read,
  and the n-gram cross-entropies a language model must beat.
- ``viz``, ``widgets``, ``show``, ``slides``: the lessons' figures, interactive explorers, tables and decks.
- ``checks``: the exercise checks (``check("02.1", answer)``); ``cell_metadata``: what a notebook cell's
  metadata says (roles, tags, read-only); ``authoring``: exercise notebooks generated from solutions;
  ``notebook_execution``: notebooks executed in a fresh kernel; ``grading``: the instructor's grader;
  ``cli``: the command.
"""

from transformer_course.attention import masked_softmax, scaled_dot_product_attention
from transformer_course.masking import causal_mask, padding_mask, to_additive_mask, to_boolean_mask

__all__ = [
    "masked_softmax",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "to_additive_mask",
    "to_boolean_mask",
]
__version__ = "0.1.0"
