"""The rows of a trained inverted file as 4-bit residual codes (`ivf`'s saved layout 2).

Owns the code of one row and the scores of a list's rows against a query. A row x (a unit
vector) in the list of centroid c (a unit vector) is kept as

    x ≈ α·c + step·(n − 7.5),   n ∈ 0..15 per dimension (a nibble),

with α = x·c, the residual r = x − α·c cut into 16 uniform levels of `step` =
STEP_SD × its root-mean-square (the step that gives a Gaussian's least squared error with
16 levels), and α and step then divided by the norm of what the code decodes to, so that
a decoded row is a unit vector and a score is the cosine of the decoded row. A row takes
dim/2 bytes of nibbles (dimension j in the high nibble of byte j, dimension j + dim/2 in
its low one) and two float32: 136 bytes at 256 dimensions instead of the int8 row's 260.

Why 4-bit residuals (bench/RESULTS.md, "The semantic index in 4-bit codes", s18-vecdisk):
measured on the 100,040 WordLlama rows of the N=100k load against the int8 rows' cosines,
the residual code's score error is 0.0040 on average (0.0057 for a 4-bit code of x itself,
0.032 for a sign code of 32 bytes); an exact re-rank of a shortlist by re-embedding the
concepts' texts was also measured, and costs 5–11 ms per 100 rows (the tokenizer alone
2.5–7), more than a whole SEARCH.

A score needs no decoded row: with q the unit query, qc = c·q (the probe already computed
it) and the nibbles as float32,

    x̂·q = α·qc + step·(n_hi·q[:h] + n_lo·q[h:] − 7.5·Σq).
"""
from __future__ import annotations

import numpy as np

STEP_SD = 0.335             # the step, in root-mean-squares of the residual (16 levels)
_LEVEL0 = 7.5               # nibble n stands for (n - 7.5) steps
_BLOCK = 1024               # rows coded per step of `encode`


def half(dim: int) -> int:
    """Bytes of a row's code (dimensions are padded to an even count)."""
    return (dim + 1) // 2


def encode(x: np.ndarray, c: np.ndarray, alpha: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The codes of the unit rows `x` whose lists' centroids are the rows of `c` (one per
    row of `x`; `alpha`: each row's dot product with its centroid, when known): nibbles
    (n, half(dim)) uint8, α and step (n,) float32."""
    x = np.asarray(x, dtype=np.float32)
    c = np.asarray(c, dtype=np.float32)
    if alpha is None:
        alpha = np.einsum("ij,ij->i", x, c)
    alpha = np.asarray(alpha, dtype=np.float32)
    if len(x) > _BLOCK:             # a block at a time: its float arrays stay in cache
        parts = [_encode(x[i:i + _BLOCK], c[i:i + _BLOCK], alpha[i:i + _BLOCK])
                 for i in range(0, len(x), _BLOCK)]
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]))
    return _encode(x, c, alpha)


def _encode(x: np.ndarray, c: np.ndarray, alpha: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, dim = x.shape
    h = half(dim)
    r = c * -alpha[:, None]
    r += x                                          # the residual x − α·c
    step = np.sqrt(np.einsum("ij,ij->i", r, r) / np.float32(dim)) * np.float32(STEP_SD)
    step = np.maximum(step, np.float32(1e-12))      # (x on its centroid: r = 0)
    r /= step[:, None]
    r += np.float32(_LEVEL0 + 0.5)
    np.floor(r, out=r)
    np.clip(r, 0, 15, out=r)                        # the nibbles, as float32
    nib = r.astype(np.uint8)
    if dim < 2 * h:
        nib = np.concatenate([nib, np.full((n, 1), 8, dtype=np.uint8)], axis=1)
    codes = (nib[:, :h] << 4) | nib[:, h:]
    # Normalised, so that a decoded row has unit length and a score is its cosine: with
    # e = n − 7.5, |α·c + step·e|² = α²|c|² + 2·α·step·(c·e) + step²·|e|².
    r -= np.float32(_LEVEL0)
    norm2 = alpha * alpha * np.einsum("ij,ij->i", c, c) \
        + 2 * alpha * step * np.einsum("ij,ij->i", c, r) + step * step * np.einsum("ij,ij->i", r, r)
    norm = np.sqrt(np.maximum(norm2, 0)).astype(np.float32)
    norm = np.where(norm > 0, norm, np.float32(1.0))
    return codes, (alpha / norm).astype(np.float32), (step / norm).astype(np.float32)


def decode(codes: np.ndarray, alpha: np.ndarray, step: np.ndarray, c: np.ndarray,
           dim: int) -> np.ndarray:
    """The unit rows the codes stand for, float32 (`c`: each row's list's centroid)."""
    return _decoded(codes, alpha, step, np.asarray(c, dtype=np.float32), dim)


def _decoded(codes: np.ndarray, alpha: np.ndarray, step: np.ndarray, c: np.ndarray,
             dim: int) -> np.ndarray:
    nib = np.concatenate([codes >> 4, codes & 15], axis=1)[:, :dim].astype(np.float32)
    return (alpha[:, None] * c + step[:, None] * (nib - np.float32(_LEVEL0))
            ).astype(np.float32)


class Query:
    """A unit query split as the codes are (`scores`)."""

    __slots__ = ("byte", "lo", "base")

    def __init__(self, qu: np.ndarray) -> None:
        dim = len(qu)
        h = half(dim)
        q = np.zeros(2 * h, dtype=np.float32)
        q[:dim] = qu
        # n_hi·q_hi + n_lo·q_lo = byte·(q_hi/16) + n_lo·(q_lo − q_hi/16), byte = 16·n_hi + n_lo:
        # the whole byte converted as it is, one shift fewer per list (~15 % of a scan).
        self.byte = (q[:h] / np.float32(16)).astype(np.float32)
        self.lo = (q[h:] - self.byte).astype(np.float32)
        self.base = np.float32(_LEVEL0 * float(q.sum()))

    def scores(self, codes: np.ndarray, alpha: np.ndarray, step: np.ndarray,
               qc: float) -> np.ndarray:
        """Cosines of the decoded rows of one list (centroid·query = `qc`), float32."""
        dots = codes.astype(np.float32) @ self.byte
        dots += (codes & 15).astype(np.float32) @ self.lo
        dots -= self.base
        return (alpha * np.float32(qc) + step * dots).astype(np.float32)
