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
}
RIGHT_PE = {"python loops, float64": pe_loops, "exp-log frequencies, float32": pe_float32}


def rotation_loops(k, d, base=10000.0):
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        angle = k / base ** (2 * i / d)
        c, s = math.cos(angle), math.sin(angle)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1], M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = c, s, -s, c
    return M


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
}
RIGHT_ROTATION = {"loops, float64": rotation_loops, "least squares from the table": rotation_by_solving}

EXERCISES = {"06.1": (WRONG_PE, RIGHT_PE), "06.2": (WRONG_ROTATION, RIGHT_ROTATION)}
