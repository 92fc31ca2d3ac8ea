"""Exercise 5.5 (predict): what standard attention's scores cost in memory at a long context.

The question (lesson 5, section 1). Standard attention writes the whole score matrix
S = q k^T to memory: one (batch, heads, seq, seq) tensor. Take a long-context model: batch 2, 32
heads, head_dim 128, a sequence of 32768 tokens, float16. How many GB (10^9 bytes) does ONE such
score matrix take in float16? (Section 1's table counts two matrices, the float32 scores and the
float16 probabilities, at other sizes: do the arithmetic for this one.) For scale: q, k, v and o
together take 4 x 2 x 32 x 32768 x 128 x 2 bytes, about 2.1 GB, and an H200 holds 141 GB.

Write your number below (within 10% counts: GB or GiB, either), then run this file.

Run it: python lesson05_flash_attention/exercises/score_memory.py   (--hint for a hint, --solution for ours)
"""
from common.exercise import Exercise, fingerprint

ANSWER = None  # in GB


EXERCISE = Exercise(
    lesson="lesson05_flash_attention", name="score_memory", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}),
    hints=["One score per (query, key) pair, per head, per batch element: how many elements has a (B, H, seq, seq) "
           "tensor? head_dim does not enter.",
           "2 x 32 x 32768 x 32768 elements, 2 bytes each (float16).",
           "32768^2 = 2^30, so it is 2 x 32 x 2^30 x 2 bytes = 2^37 bytes: 128 GiB, or 137 GB."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
