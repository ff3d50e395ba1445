"""Answers to lesson 06's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import math

import torch


def pe_loops(n, d, base=10000.0):
    """Python floats, as the formula reads: accepted although computed in float64."""
    rows = []
    for pos in range(n):
        row = []
        for j in range(d):
            angle = pos / base ** ((j - j % 2) / d)
            row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def pe_float32(n, d, base=10000.0):
    omega = torch.exp(-torch.arange(0, d, 2) / d * math.log(base))
    angles = torch.arange(n)[:, None] * omega
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)[:, :d]


def pe_table(n, d, base, frequency, swap=False, concat=False):
    j = torch.arange(d, dtype=torch.float64)
    angles = torch.arange(n, dtype=torch.float64)[:, None] * frequency(j, d, base)
    if concat:
        pair = angles[:, ::2]
        return torch.cat([pair.sin(), pair.cos()], dim=-1)[:, :d]
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    return torch.where(j.long() % 2 == 0, first, second)


def pe_integer_exponent(n, d, base=10000.0):
    """2 * i // d with Python ints: the exponent is 0 in every pair but none, so every frequency is 1."""
    P = torch.zeros(n, d)
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / base ** (2 * i // d)
            P[pos, 2 * i], P[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return P


def pe_log10(n, d, base=10000.0):
    """The exp-log form with log10 where the natural log belongs."""
    omega = torch.exp(torch.arange(0, d, 2) * -(math.log10(base) / d))
    angles = torch.arange(n)[:, None] * omega
    P = torch.zeros(n, d)
    P[:, 0::2], P[:, 1::2] = angles.sin(), angles.cos()
    return P


def pair(j, d, b):
    return b ** (-(j - j % 2) / d)


WRONG_PE = {
    "sin/cos swapped": (lambda n, d, base: pe_table(n, d, base, pair, swap=True), "sin and cos are swapped"),
    "not interleaved": (lambda n, d, base: pe_table(n, d, base, pair, concat=True), "not interleaved"),
    "column index": (lambda n, d, base: pe_table(n, d, base, lambda j, d, b: b ** (-j / d)), "column index j"),
    "i instead of 2i": (lambda n, d, base: pe_table(n, d, base, lambda j, d, b: b ** (-(j // 2) / d)),
                        "i/d instead of 2i/d"),
    "2j": (lambda n, d, base: pe_table(n, d, base, lambda j, d, b: b ** (-2 * j / d)), "2j/d"),
    "base ignored": (lambda n, d, base: pe_table(n, d, 10000.0, pair), "base is not used"),
    "transposed": (lambda n, d, base: pe_table(n, d, base, pair).T, "expected shape"),
    "positions from 1": (lambda n, d, base: pe_table(n + 1, d, base, pair)[1:], "positions start at 1"),
    "multiplied by base^(2i/d)": (lambda n, d, base: pe_table(n, d, base, lambda j, d, b: b ** ((j - j % 2) / d)),
                                  "wrong result for"),
    "integer division in the exponent": (pe_integer_exponent, "wrong result for"),
    "log10 of the base": (pe_log10, "wrong result for"),
}
RIGHT_PE = {"python loops, float64": pe_loops, "exp-log frequencies, float32": pe_float32}


def rotation_loops(k, d, base=10000.0):
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        angle = k / base ** (2 * i / d)
        c, s = math.cos(angle), math.sin(angle)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1], M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = c, s, -s, c
    return M


def rotation_textbook(k, d, base=10000.0):
    """The rotation matrix as a textbook writes it, which turns the other way."""
    M = torch.zeros(d, d)
    for i in range(d // 2):
        angle = k * base ** (-2 * i / d)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[math.cos(angle), -math.sin(angle)],
                                                                 [math.sin(angle), math.cos(angle)]])
    return M


def rotation_every_other_block(k, d, base=10000.0):
    """range(0, d // 2, 2) where range(d // 2) belongs: pair index and row index mixed up."""
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(0, d // 2, 2):
        angle = k / base ** (2 * i / d)
        M[i, i], M[i, i + 1], M[i + 1, i], M[i + 1, i + 1] = math.cos(angle), math.sin(angle), -math.sin(angle), \
            math.cos(angle)
    return M


def rotation_block_diag(k, d, base=10000.0):
    omega = base ** (-torch.arange(0, d, 2) / d)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    blocks = [torch.stack([torch.stack([ci, si]), torch.stack([-si, ci])]) for ci, si in zip(c, s, strict=True)]
    return torch.block_diag(*blocks)


def rotation_by_solving(k, d, base=10000.0):
    """Least squares: the matrix that maps PE(pos) to PE(pos + k) over many positions."""
    from transformer_course.positional import sinusoidal_encoding

    pe = sinusoidal_encoding(200 + abs(k), d, base, dtype=torch.float64)
    start = max(0, -k)
    X, Y = pe[start : start + 150], pe[start + k : start + k + 150]
    M = torch.linalg.lstsq(X, Y).solution.T  # Y = X M^T
    return M.masked_fill(M.abs() < 1e-9, 0.0)


WRONG_ROTATION = {
    "wrong direction": (lambda k, d, base: rotation_loops(-k, d, base), "wrong way"),
    "angle omega": (lambda k, d, base: rotation_loops(1, d, base), "not k * omega"),
    "no blocks": (lambda k, d, base: torch.eye(d), "values differ"),
    "i/d exponent": (lambda k, d, base: rotation_loops(k, 2 * d, base)[:d, :d], "i/d instead of 2i/d"),
    "the textbook rotation [[cos, -sin], [sin, cos]]": (rotation_textbook, "wrong way"),
    "omega = base^(2i/d)": (lambda k, d, base: rotation_loops(k, d, 1 / base), "wrong result for"),
    "every other block left out": (rotation_every_other_block, "wrong result for"),
    "2j/d with the column j = 2i": (lambda k, d, base: rotation_loops(k, d, base ** 2), "wrong result for"),
}
RIGHT_ROTATION = {"loops, float64": rotation_loops, "least squares from the table": rotation_by_solving,
                  "torch.block_diag of 2 x 2 blocks": rotation_block_diag}

EXERCISES = {"06.1": (WRONG_PE, RIGHT_PE), "06.2": (WRONG_ROTATION, RIGHT_ROTATION)}

#: The mistake each new wrong answer must be named by (None: no name, the case and the difference only).
MISTAKES = {
    "06.1": {"positions from 1": "positions-from-one", "multiplied by base^(2i/d)": None,
             "integer division in the exponent": None, "log10 of the base": None},
    "06.2": {"the textbook rotation [[cos, -sin], [sin, cos]]": "rotation-reversed", "omega = base^(2i/d)": None,
             "every other block left out": None, "2j/d with the column j = 2i": None},
}
