"""SPOILER: the answer of exercise 5.5: 2 x 32 x 32768^2 x 2 bytes."""
GIVEN = "e91a7576a078"  # common.exercise.given_fingerprint of score_memory.py as the course ships it


ANSWER = 137.4


# The answer and why (read only when checking, or with --solution).
def answer():
    B, H, seq, itemsize = 2, 32, 32768, 2
    gb = B * H * seq * seq * itemsize / 1e9
    return gb, (f"B x H x seq x seq x 2 bytes = 2 x 32 x 32768^2 x 2 = {gb:.1f} GB ({gb * 1e9 / 2**30:.0f} GiB): one "
                "score matrix, in the narrowest dtype, nearly fills an H200, 64 times what q, k, v and o take. It "
                "grows as seq^2 while they grow as seq: double the context and it quadruples. Flash attention never "
                "writes it: each tile of scores lives in registers for one step of the loop (section 8 measures "
                "the peaks).")
