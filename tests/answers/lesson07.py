"""Answers to lesson 07's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.blocks import PositionWiseFFN as ReferenceFFN
from transformer_course.blocks import residual
from transformer_course.multihead import MultiHeadAttention

# --- 07.1 layer_norm(x, gamma, beta, eps) -----------------------------------------------------------


def standardise(x, eps, dim=-1, unbiased=False):
    return (x - x.mean(dim, keepdim=True)) / torch.sqrt(x.var(dim, keepdim=True, unbiased=unbiased) + eps)


def layer_norm_two_pass(x, gamma, beta, eps=1e-5):
    mean = x.sum(-1, keepdim=True) / x.shape[-1]
    var = ((x - mean) ** 2).sum(-1, keepdim=True) / x.shape[-1]
    return gamma * (x - mean) * torch.rsqrt(var + eps) + beta


WRONG_LN = {
    "unbiased": (lambda x, g, b, eps=1e-5: standardise(x, eps, unbiased=True) * g + b, "unbiased"),
    "eps outside": (lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True, unbiased=False)
                                                                                + eps) * g + b, "outside the square"),
    "batch axis": (lambda x, g, b, eps=1e-5: standardise(x, eps, dim=0) * g + b, "wrong axis"),
    "no affine": (lambda x, g, b, eps=1e-5: standardise(x, eps), "not applied"),
    "swapped affine": (lambda x, g, b, eps=1e-5: standardise(x, eps) * b + g, "swapped"),
    "no eps": (lambda x, g, b, eps=1e-5: standardise(x, 0.0) * g + b, "eps is ignored"),
    "mean not subtracted": (lambda x, g, b, eps=1e-5: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g + b,
                            "that is RMSNorm"),
    "divided by the variance": (lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True))
                                / (x.var(-1, keepdim=True, unbiased=False) + eps) * g + b, "divided by the variance"),
    "statistics of the whole tensor": (lambda x, g, b, eps=1e-5: (x - x.mean())
                                       / torch.sqrt(x.var(unbiased=False) + eps) * g + b, "wrong result for"),
    "affine before normalising": (lambda x, g, b, eps=1e-5: standardise(x * g + b, eps), "wrong result for"),
    "keepdim left out": (lambda x, g, b, eps=1e-5: (x - x.mean(-1)) / torch.sqrt(x.var(-1, unbiased=False) + eps)
                         * g + b, "your code raised"),
}
RIGHT_LN = {
    "two passes with rsqrt": layer_norm_two_pass,
    "var_mean": lambda x, g, b, eps=1e-5: (lambda v, m: (x - m) / (v + eps).sqrt() * g + b)(
        *torch.var_mean(x, -1, unbiased=False, keepdim=True)),
    "F.layer_norm": lambda x, g, b, eps=1e-5: F.layer_norm(x, (x.shape[-1],), g, b, eps),
    "E[x^2] - E[x]^2": lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / torch.sqrt(
        (x * x).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2 + eps) * g + b,
}

# --- 07.2 PositionWiseFFN(d_model, d_ff) ------------------------------------------------------------


class FFN(nn.Module):
    mistake = None

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.W_1, self.W_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        hidden = self.W_1(F.relu(x) if self.mistake == "activation first" else x)
        if self.mistake not in ("no activation", "activation first"):
            hidden = {"gelu": F.gelu, "sigmoid": torch.sigmoid}.get(self.mistake, F.relu)(hidden)
        if self.mistake == "dropout":  # F.dropout's training defaults to True: it drops in eval mode too
            hidden = F.dropout(hidden, 0.1)
        out = self.W_2(hidden)
        if self.mistake == "relu after both":
            out = F.relu(out)
        return x + out if self.mistake == "residual" else out


def ffn_with(mistake):
    return type(f"FFN_{mistake.replace(' ', '_')}", (FFN,), {"mistake": mistake})


class FFNActivationLast(FFN):
    def forward(self, x):
        return F.relu(self.W_2(self.W_1(x)))


class FFNFunctional(FFN):
    def forward(self, x):
        return F.linear(torch.clamp_min(F.linear(x, self.W_1.weight, self.W_1.bias), 0), self.W_2.weight, self.W_2.bias)


class FFNNamedOtherwise(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))


class FFNWithoutBias(FFN):
    def __init__(self, d_model, d_ff):
        nn.Module.__init__(self)
        self.W_1, self.W_2 = nn.Linear(d_model, d_ff, bias=False), nn.Linear(d_ff, d_model, bias=False)


WRONG_FFN = {
    "no activation": (ffn_with("no activation"), "activation is missing"),
    "activation last": (FFNActivationLast, "after W_2"),
    "gelu": (ffn_with("gelu"), "GELU"),
    "residual inside": (ffn_with("residual"), "residual belongs to the block"),
    "other names": (FFNNamedOtherwise, "missing ['W_1.bias'"),
    "relu after both layers": (ffn_with("relu after both"), "wrong result for"),
    "sigmoid": (ffn_with("sigmoid"), "wrong result for"),
    "activation before W_1": (ffn_with("activation first"), "wrong result for"),
    "F.dropout left on": (ffn_with("dropout"), "wrong result for"),
    "linear layers without bias": (FFNWithoutBias, "missing ['W_1.bias', 'W_2.bias']"),
}
RIGHT_FFN = {"modules": FFN, "functional": FFNFunctional, "the package's": ReferenceFFN}

# --- 07.3 EncoderBlock(d_model, num_heads, d_ff), post-norm ---------------------------------------


class Block(nn.Module):
    mistake = None

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, num_heads)
        self.ffn = ReferenceFFN(d_model, d_ff)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        if self.mistake == "inverted mask" and mask is not None:
            mask = ~mask
        attended = self.attention(x, mask=None if self.mistake == "no mask" else mask)[0]
        if self.mistake == "pre-norm":
            x = x + self.attention(self.norm1(x), mask=mask)[0]
            return x + self.ffn(self.norm2(x))
        if self.mistake == "residual after norm":
            x = self.norm1(attended) + x
            return self.norm2(self.ffn(x)) + x
        if self.mistake == "no residual":
            return self.norm2(self.ffn(self.norm1(attended)))
        if self.mistake == "norms swapped":
            x = self.norm2(x + attended)
            return self.norm1(x + self.ffn(x))
        if self.mistake == "first input in both residuals":
            h = self.norm1(x + attended)
            return self.norm2(x + self.ffn(h))
        if self.mistake == "ffn reads the attention output":
            return self.norm2(self.norm1(x + attended) + self.ffn(attended))
        x = self.norm1(x + attended)
        return self.norm2(x + self.ffn(x))


def block_with(mistake):
    return type(f"Block_{mistake.replace(' ', '_')}", (Block,), {"mistake": mistake})


class BlockWithAddNorm(Block):
    """Written with the package's residual step (Add & Norm in a post-norm block): a correct alternative."""

    def forward(self, x, mask=None):
        x = residual(x, self.norm1, False, lambda h: self.attention(h, h, h, mask)[0])  # norm1(x + attention(x))
        return residual(x, self.norm2, False, self.ffn)


class BlockReturningWeights(Block):
    def forward(self, x, mask=None):
        return super().forward(x, mask), None


class BlockMaskAsKey(Block):
    """The mask passed positionally, where the attention expects its key."""

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask)[0])
        return self.norm2(x + self.ffn(x))


class BlockWeightsForOutput(Block):
    """attention(...)[1]: the attention weights (B, h, n, n) where its output belongs."""

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask)[1])
        return self.norm2(x + self.ffn(x))


WRONG_BLOCK = {
    "pre-norm": (block_with("pre-norm"), "pre-norm"),
    "residual after norm": (block_with("residual after norm"), "residual is added after the norm"),
    "no mask": (block_with("no mask"), "mask is not passed"),
    "tuple returned": (BlockReturningWeights, "expected a torch.Tensor, got tuple"),
    "no residual": (block_with("no residual"), "residual connections are missing"),
    "norms swapped": (block_with("norms swapped"), "norm1 and norm2 are swapped"),
    "first input in both residuals": (block_with("first input in both residuals"), "wrong result for"),
    "ffn reads the attention output": (block_with("ffn reads the attention output"), "wrong result for"),
    "inverted mask": (block_with("inverted mask"), "wrong result for"),
    "mask passed as the key": (BlockMaskAsKey, "raised"),
    "the weights taken for the output": (BlockWeightsForOutput, "raised"),
}
RIGHT_BLOCK = {"straight": Block, "loop over sub-layers": BlockWithAddNorm}

EXERCISES = {
    "07.1": (WRONG_LN, RIGHT_LN),
    "07.2": (WRONG_FFN, RIGHT_FFN),
    "07.3": (WRONG_BLOCK, RIGHT_BLOCK),
}

#: The mistake each new wrong answer must be named by (None: no name, the case and the difference only).
MISTAKES = {
    "07.1": {"mean not subtracted": "mean-not-subtracted", "divided by the variance": "variance-not-rooted",
             "statistics of the whole tensor": None, "keepdim left out": None, "affine before normalising": None},
    "07.2": {"relu after both layers": None, "sigmoid": None, "activation before W_1": None, "F.dropout left on": None,
             "linear layers without bias": None},
    "07.3": {"no residual": "residual-missing", "norms swapped": "norms-swapped", "first input in both residuals": None,
             "ffn reads the attention output": None, "inverted mask": None, "mask passed as the key": None,
             "the weights taken for the output": None},
}
