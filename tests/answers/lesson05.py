"""Answers to lesson 05's exercise: known-wrong ones with the hint the check must give, and correct ones
written differently from the solution, which the check must accept."""

import torch


def source_mask(lens, n_enc):
    return (torch.arange(n_enc) < lens[:, None])[:, None, :]


def cross_with_4d_mask(x, mem, lens, mha):
    mask = torch.arange(mem.shape[1]).expand(len(lens), 1, 1, -1) < lens.view(-1, 1, 1, 1)
    return mha(x, mem, mem, mask=mask)


def cross_with_additive_mask(x, mem, lens, mha):
    blocked = ~source_mask(lens, mem.shape[1])
    additive = torch.zeros(blocked.shape, dtype=x.dtype).masked_fill(blocked, float("-inf"))
    return mha(x, key=mem, mask=additive)


WRONG = {
    "roles swapped": (lambda x, mem, lens, mha: mha(mem, x, x), "roles are swapped"),
    "no mask": (lambda x, mem, lens, mha: mha(x, mem, mem), "not masked"),
    "inverted": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=~source_mask(lens, mem.shape[1])), "inverted"),
    "causal": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=source_mask(lens, mem.shape[1])
                                             & torch.ones(x.shape[1], mem.shape[1]).tril().bool()), "no causal mask"),
    "decoder length": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=source_mask(lens.clamp_max(x.shape[1]),
                                                                                   x.shape[1])), "decoder's length"),
    "weights dropped": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=source_mask(lens, mem.shape[1]))[0],
                        "expected a tuple"),
}
RIGHT = {
    "4-D mask": cross_with_4d_mask,
    "additive mask, value defaults to key": cross_with_additive_mask,
}

EXERCISES = {"05.1": (WRONG, RIGHT)}
