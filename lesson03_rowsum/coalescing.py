"""Lesson 3, second file: coalescing, the same bytes read along rows and down columns.

main.py's last section (`python lesson03_rowsum/main.py --sections coalescing`); it imports
main.py's row_sum.
"""
import torch

from common import bench
from common.device import DEVICE, INTERPRET
from common.results import print_recorded
from lesson03_rowsum.main import row_sum


# %% [markdown]
# ## Coalescing
# A warp's 32 threads load together, and memory answers in 128-byte lines of four 32-byte sectors.
# When thread t reads element t of a row, the 32 loads of 4 bytes fill one line; when it reads
# element t of a column (a row apart), they touch 32 lines, a sector of each, and use 4 of its 32
# bytes. row_sum reads x.t() through its strides correctly, but fetches far more than it uses: the
# next program (the next row) wants the neighbouring 4 bytes of the same sectors, and the L2 cache
# saves some of that, so the loss measured (RESULTS.md) is several-fold rather than 8-fold.


# %%
def lines_per_warp(stride: int, itemsize: int = 4, line: int = 128) -> int:
    """128-byte lines that one warp's 32 loads touch, when thread t reads element t * stride."""
    return len({t * stride * itemsize // line for t in range(32)})


def coalescing(M: int = 4096, N: int = 16384) -> bench.Table | None:
    print(f"One warp, 32 loads of 4 bytes: side by side (stride 1) {lines_per_warp(1)} line of 128 bytes; "
          f"a row apart (stride {M}) {lines_per_warp(M)} lines.")
    if INTERPRET:  # the interpreter reads numpy arrays: no lines, no warps
        print_recorded(__file__, "Coalescing")
        return None
    x = torch.randn(M, N, device=DEVICE)
    xt = torch.randn(N, M, device=DEVICE).t()  # the same shape, M x N, stored column by column
    cases = {("rows contiguous (x)", "Triton row_sum"): lambda: row_sum(x),
             ("rows contiguous (x)", "torch.sum(dim=1)"): lambda: x.sum(dim=1),
             ("columns contiguous (x.t() of an N x M tensor)", "Triton row_sum"): lambda: row_sum(xt),
             ("columns contiguous (x.t() of an N x M tensor)", "torch.sum(dim=1)"): lambda: xt.sum(dim=1)}
    ms = bench.side_by_side(cases)
    rows = [(layout, name, lines_per_warp(1 if layout.startswith("rows") or name.startswith("torch") else M),
             ms[layout, name] * 1e3, bench.gbps(x.numel() * 4, ms[layout, name])) for layout, name in cases]
    return bench.print_table(rows, ["layout", "implementation", "lines per warp load", "kernel µs", "GB/s"],
                             title=f"Coalescing: row sums of a {M} x {N} float32 tensor, two layouts",
                             note=f"{bench.stamp()}. GB/s counts one read of x. torch.sum reads a column-major "
                                  "tensor along its columns (whole lines), summing many rows at once; row_sum walks "
                                  "each row, a line per element." + bench.SIDE_BY_SIDE_NOTE,
                             plot=dict(x="layout", y="GB/s", series=["implementation"], ceiling=bench.copy_bandwidth(),
                                       ceiling_label="device copy (measured)"))
