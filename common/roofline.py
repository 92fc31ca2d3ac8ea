"""The roofline: which ceiling a kernel can reach, from how much arithmetic it does per byte.

A kernel moves B bytes through memory and does F floating-point operations. Its arithmetic
intensity is AI = F / B, in FLOPs per byte. The memory system delivers at most beta bytes per
second and the cores compute at most pi FLOPs per second, so the kernel runs at most at

    P = min(pi, beta x AI)

Below the ridge point AI = pi / beta the kernel is memory-bound (vector add: 1 FLOP per 12 bytes;
a softmax; a row sum): only fewer bytes make it faster, and fusion does exactly that, by keeping
intermediate results on chip (the same FLOPs over fewer bytes: a higher AI). Above it the kernel
is compute-bound (a large matmul: hundreds of FLOPs per byte), and only the tensor cores' rate
matters. (That rate is the ceiling drawn here; arithmetic outside a tl.dot runs on the ordinary
fp32 cores, a tenth of it or less, so an element-wise kernel meets its own roof much sooner: the
lesson kernels below AI = 1 are far under either.) Every lesson records its kernels' points
("Roofline points" in its RESULTS.md); `python -m common.results` draws them all under the two
measured ceilings in roofline.png.
"""
import math

from common import bench
from common.table import Table, print_table

TITLE = "Roofline points"


def intensity(flops: float, nbytes: float) -> float:
    """Arithmetic intensity, FLOPs per byte moved through memory."""
    return flops / nbytes


def attainable(ai: float, peak_tflops: float, bandwidth_gbps: float) -> float:
    """The roofline, in TFLOP/s: min(pi, beta x AI)."""
    return min(peak_tflops, bandwidth_gbps * ai / 1e3)


def points(cases: dict) -> Table:
    """cases: {(kernel, size): (fn, flops, bytes)}. Each kernel's arithmetic intensity, its measured
    throughput (kernel time, bench.side_by_side) and the share of what the roofline allows (GPU)."""
    ms = bench.side_by_side({key: fn for key, (fn, _, _) in cases.items()})
    peak, bandwidth = bench.matmul_rate(), bench.copy_bandwidth()
    rows = []
    for (kernel, size), (_, flops, nbytes) in cases.items():
        ai = intensity(flops, nbytes)
        achieved = bench.tflops(flops, ms[kernel, size])
        rows.append([kernel, size, flops / 1e9, nbytes / 1e9, ai, ms[kernel, size] * 1e3, achieved,
                     bench.percent(achieved, attainable(ai, peak, bandwidth))])
    return print_table(rows, ["kernel", "size", "GFLOP", "GB moved", "FLOP/byte", "kernel µs", "TFLOP/s", "% of roofline"],
                       title=TITLE, floatfmt=".3g",
                       note=f"FLOPs and bytes are the algorithm's (each input read once, each output written once), "
                            f"except where the name says otherwise. Roofline: min({peak:.0f} TFLOP/s, {bandwidth:.0f} "
                            f"GB/s x FLOP/byte), both measured (bf16 matmul, device copy); a memory-bound kernel's '% of "
                            "roofline' is its share of the copy's rate, which it can pass a little (a kernel that reads more than it "
                            "writes streams faster than a copy, which does both equally). "
                            f"{bench.SIDE_BY_SIDE_NOTE}")


def plot(pts: list, peak: float, bandwidth: float, gpu: str, path: str) -> bool:
    """pts: (lesson, kernel, FLOP/byte, TFLOP/s) of every lesson's recorded points; drawn log-log
    under the two ceilings into `path`. Returns False where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(9, 5.5))
    ais = [ai for _, _, ai, _ in pts]
    ridge = peak / bandwidth * 1e3  # FLOP/byte where the two ceilings meet
    xs = sorted([ridge] + [min(ais) / 2 * 1.25**i for i in range(200) if min(ais) / 2 * 1.25**i < max(ais) * 4])
    ax.plot(xs, [attainable(x, peak, bandwidth) for x in xs], color="black", linewidth=1.5,
            label=f"roofline: min({peak:.0f} TFLOP/s, {bandwidth:.0f} GB/s x AI)")
    seen = {}
    for lesson, kernel, ai, achieved in pts:
        ax.scatter(ai, achieved, s=25)
        spot = (round(math.log10(ai), 1), round(math.log10(achieved), 1))  # points close together: labels apart
        near = seen.setdefault(spot, 0)
        seen[spot] += 1
        ax.annotate(f"{lesson}: {kernel}", (ai, achieved), fontsize=6, xytext=(4, 2 - 8 * near), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of memory traffic)")
    ax.set_ylabel("measured TFLOP/s (kernel time)")
    ax.set_title(f"Every lesson's kernels under the roofline ({gpu})", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
