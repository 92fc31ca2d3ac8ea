"""SPOILER: the solution of exercise 2.3 (long rows: the online softmax in two walks), and wrong ones the tests
check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Variant, Wrong, patched


GIVEN = "02fddbc8c935"  # common.exercise.given_fingerprint of long_rows.py as the course ships it


@triton.jit
def online_softmax_kernel(x_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    """y[row] = softmax(x[row]), walking the row twice in tiles of BLOCK_N columns."""
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * stride_xm
    m = tl.full([], float("-inf"), tl.float32)   # the max so far
    l = tl.zeros([], dtype=tl.float32)           # the sum of exp(x - m) so far
    for start in range(0, N, BLOCK_N):           # walk 1
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: -inf - (-inf) would be NaN
        l = l * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)
        m = m_new
    for start in range(0, N, BLOCK_N):           # walk 2
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < N)


# The mistakes, each an edit of the solution above (common.exercise.patched)
LOAD = ('        cols = start + tl.arange(0, BLOCK_N)\n'
        '        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)\n')
GUARD = 'm_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: -inf - (-inf) would be NaN'
UPDATE = ("        m_new = tl.maximum(m, tl.max(x, axis=0))\n        " + GUARD + "\n"
          "        l = l * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)\n        m = m_new\n")
WRONG = [Wrong("three walks", "budget", "loaded 3 times",  # walk 1 finds the max alone, a walk more for the sum
               dict(online_softmax_kernel=patched(online_softmax_kernel, (
                   UPDATE, "        m = tl.maximum(m, tl.max(x, axis=0))\n"
                           "    for start in range(0, N, BLOCK_N):           # walk 1b: the sum\n"
                           + LOAD + "        l += tl.sum(tl.exp(x - m), axis=0)\n")))),
         Wrong("l not rescaled", "values", "case 'ragged last tile",  # the old terms still scaled by the old max
               dict(online_softmax_kernel=patched(online_softmax_kernel, ("l = l * tl.exp(m - m_safe) + ", "l += ")))),
         Wrong("running max from 0", "values", "case 'all negative",  # 0 is above every value of an all-negative row
               dict(online_softmax_kernel=patched(online_softmax_kernel, ('m = tl.full([], float("-inf"), tl.float32)',
                                                                          "m = tl.zeros([], dtype=tl.float32)")))),
         Wrong("-inf - -inf", "values", "case 'the first 40 columns -inf",  # NaN while the row is all -inf
               dict(online_softmax_kernel=patched(online_softmax_kernel, (GUARD, "m_safe = m_new")))),
         Wrong("last tile missed", "memory", "left unwritten",  # whole tiles only: the ragged last one is left out
               dict(online_softmax_kernel=patched(online_softmax_kernel, ("range(0, N, BLOCK_N)",
                                                                          "range(0, N - BLOCK_N + 1, BLOCK_N)", 2))))]

# Honest variations, each an edit of the solution above: they must pass
VARIANTS = [Variant("the running max started at x[row, 0], a masked scalar load",  # one element more, no third walk
                    dict(online_softmax_kernel=patched(online_softmax_kernel,
                                                       ('m = tl.full([], float("-inf"), tl.float32)',
                                                        'm = tl.load(x_row, mask=N > 0, other=0.0).to(tl.float32)'))))]
