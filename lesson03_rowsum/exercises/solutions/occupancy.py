"""SPOILER: the answer of exercise 3.4."""
GIVEN = "1140e9e2e96c"  # common.exercise.given_fingerprint of occupancy.py as the course ships it


ANSWER = 25.0


# The answer and why (read only when checking, or with --solution).
def answer():
    registers, warps = 102, 4
    per_warp = -(-registers * 32 // 256) * 256  # 3264 rounded up to 3328
    programs = min(65536 // (per_warp * warps), 64 // warps, 32)
    occupancy = 100 * programs * warps / 64
    return occupancy, (
        f"A warp takes 32 x 102 = 3264 registers, rounded up to {per_warp:,} (13 blocks of 256); a program of 4 "
        f"warps {per_warp * warps:,}; 65,536 // {per_warp * warps:,} = {programs} programs (a fifth would need "
        f"{5 * per_warp * warps:,}), which is {programs * warps} warps of 64: {occupancy:g}%. Without the rounding, "
        "102 x 128 = 13,056 registers a program would let 5 fit (31.25%): the rounding costs a program. Registers "
        "are the limit here (the warp slots would allow 16 programs, the program slots 32): fewer registers per thread "
        "raise it, as when more warps share the same tile (section 10's table).")
