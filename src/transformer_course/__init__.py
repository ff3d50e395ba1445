"""The reference package of the transformer course.

One module per idea, imported by the lessons:

- ``attention``: masked softmax and scaled dot-product attention.
- ``masking``: causal and padding masks, conversion between boolean and additive masks.
- ``checks``: the exercise checks (``check("02.1", answer)``).
- ``authoring``: generating exercise notebooks and executing lessons.
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
