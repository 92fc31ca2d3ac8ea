"""SPOILER: the answer of exercise 5.3: 2 + 4 + 6 + 8 key blocks."""
GIVEN = "5f739974d804"  # common.exercise.given_fingerprint of causal_blocks.py as the course ships it


ANSWER = 20


# The answer and why (read only when checking, or with --solution).
def reads(seq: int, BLOCK_M: int, BLOCK_N: int) -> int:
    """Key-block reads of causal attention over one (batch, head): query block m reads the key blocks up
    to the one holding its last row, min((m + 1) * BLOCK_M, seq) keys' worth."""
    return sum(-(-min((m + 1) * BLOCK_M, seq) // BLOCK_N) for m in range(-(-seq // BLOCK_M)))


def answer():
    n = reads(512, 128, 64)
    long = reads(4096, 128, 64)
    return n, (f"Query block m (rows 128m..128m + 127) needs keys 0..128m + 127: 2(m + 1) key blocks of 64, so "
               f"2 + 4 + 6 + 8 = {n} of 32 ({100 * n / 32:.1f}%), not 16. The blocks on the diagonal are read "
               "whole (and masked) although part of each lies above it. With M query blocks that is M(M + 1) "
               f"reads of 2M^2, a share of (M + 1) / 2M: at seq 4096 (M = 32) {long} of 2048, "
               f"{100 * long / 2048:.1f}%. A half only in the limit of long sequences.")
