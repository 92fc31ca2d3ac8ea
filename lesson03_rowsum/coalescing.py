"""Lesson 3, second file: coalescing, the same bytes read along rows and down columns.

main.py's last two sections (`python lesson03_rowsum/main.py --sections lines coalescing`): the
arithmetic of one warp's load, which runs anywhere, and row_sum timed on both layouts, which needs a
GPU. main.py hands in the op it times, row_sum.py's row_sum.
"""
import torch

from common import bench
from common.device import DEVICE
from common.table import print_table

LINE, SECTOR = 128, 32  # bytes: memory answers a warp in 128-byte lines of four 32-byte sectors


# %% [markdown]
# ## Coalescing
# A warp's 32 threads load together, and memory answers in 128-byte lines of four 32-byte sectors,
# fetching only the sectors some thread asked for. When thread t reads element t of a row, the 32
# loads of 4 bytes fill one line, every byte of it used; when it reads element t of a column (a row
# apart), they touch 32 lines, a sector of each, and use 4 of each sector's 32 bytes: 8 times the
# traffic for the same data.


# %%
def lines_per_warp(stride: int, itemsize: int = 4, line: int = LINE) -> int:
    """128-byte lines that one warp's 32 loads touch, when thread t reads element t * stride."""
    return len({t * stride * itemsize // line for t in range(32)})


def sectors_per_warp(stride: int, itemsize: int = 4, sector: int = SECTOR) -> int:
    """32-byte sectors memory fetches for one warp's 32 loads, when thread t reads element t * stride."""
    return len({t * stride * itemsize // sector for t in range(32)})


def lines_table(M: int = 4096):
    """Lines and sectors of one warp's load, by the distance between the elements its threads read."""
    cases = [("a row of x, float32", 1, 4), ("a row of x, float16", 1, 2), ("every other element, float32", 2, 4),
             (f"a row of x.t(), stored by columns ({M} apart), float32", M, 4)]
    rows = []
    for what, stride, itemsize in cases:
        sectors = sectors_per_warp(stride, itemsize)
        rows.append((what, stride, itemsize, lines_per_warp(stride, itemsize), sectors,
                     100 * 32 * itemsize / (sectors * SECTOR)))
    return print_table(rows, ["thread t reads", "stride (elements)", "bytes each", "lines touched", "sectors fetched",
                              "% of fetched bytes used"], floatfmt=".1f",
                       title="One warp's load: 32 threads, thread t reads element t x stride",
                       note=f"Arithmetic on the 32 addresses: which {LINE}-byte lines and {SECTOR}-byte sectors "
                            "they fall in. Memory moves whole sectors: one fetched for 4 bytes used moves 28 for "
                            "nothing.")


# %% [markdown]
# ## Coalescing, timed
# row_sum reads x.t() through its strides correctly, a line per element; torch.sum reads a
# column-major tensor along its columns (whole lines), summing many rows at once.


# %%
def timing(row_sum, M: int = 4096, N: int = 16384):
    """row_sum (row_sum.py's op) and torch.sum of an M x N float32 tensor stored by rows and by columns."""
    x = torch.randn(M, N, device=DEVICE)
    xt = torch.randn(N, M, device=DEVICE).t()  # the same shape, M x N, stored column by column
    cases = {("rows contiguous (x)", "Triton row_sum"): lambda: row_sum(x),
             ("rows contiguous (x)", "torch.sum(dim=1)"): lambda: x.sum(dim=1),
             ("columns contiguous (x.t() of an N x M tensor)", "Triton row_sum"): lambda: row_sum(xt),
             ("columns contiguous (x.t() of an N x M tensor)", "torch.sum(dim=1)"): lambda: xt.sum(dim=1)}
    ms = bench.side_by_side(cases)
    rows = [(layout, name, *bench.timing_cells(ms[layout, name], 4 * (M * N + M))) for layout, name in cases]
    return print_table(rows, ["layout", "implementation", *bench.TIMING_HEADERS],
                       title=f"Coalescing: row sums of a {M} x {N} float32 tensor, two layouts",
                       note="Bytes, GB/s and % of copy as in the timing table (section 12). Lines per warp load: "
                            "section 15's table. torch.sum reads a column-major tensor along its columns (whole "
                            "lines), summing many rows at once; row_sum walks each row, a line per element. "
                            + bench.SIDE_BY_SIDE_NOTE,
                       plot=dict(x="layout", y="GB/s", series=["implementation"], ceiling=bench.copy_bandwidth(),
                                 ceiling_label="device copy (measured)"))
