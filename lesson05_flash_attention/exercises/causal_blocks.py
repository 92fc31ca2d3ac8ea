"""Exercise 5.3 (predict): how many key blocks causal attention reads, and why not half.

The question (lesson 5, section 3, "Causal attention"). The lesson's kernel, causal, with its
first configuration for head dims to 128: BLOCK_M = 128 query rows per program, BLOCK_N = 64 keys per key
block. One (batch, head) of seq 512: 4 query blocks, each of which could read all 8 key blocks,
32 key-block reads in all without the causal mask. With it, key blocks wholly above the diagonal
are skipped (exercise 5.2). How many key-block reads are left, over the 4 query blocks together?

"About half, 16" is what one remembers from the lesson ("about half the work"): is it?

Write your number below, then run this file.

Run it: python lesson05_flash_attention/exercises/causal_blocks.py   (--hint for a hint, --solution for ours)
"""
from common.exercise import Exercise, fingerprint

ANSWER = None  # key-block reads, over the 4 query blocks of one (batch, head)


EXERCISE = Exercise(
    lesson="lesson05_flash_attention", name="causal_blocks", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}),
    hints=["Take one query block at a time: which key is the last that its last row may see?",
           "Query block m holds rows 128m..128m + 127; its last row sees keys up to 128m + 127, which lie in key "
           "blocks 0..2m + 1.",
           "2(m + 1) key blocks for m = 0, 1, 2, 3: add them up."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
