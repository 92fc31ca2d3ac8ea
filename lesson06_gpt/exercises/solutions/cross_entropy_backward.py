"""SPOILER: the solution of exercise 6.2 (cross-entropy's backward), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong


GIVEN = "998e44e151a9"  # common.exercise.given_fingerprint of cross_entropy_backward.py as the course ships it


@triton.jit
def cross_entropy_backward_kernel(x_ptr, t_ptr, lse_ptr, dloss_ptr, dx_ptr, V, stride_xm, stride_dxm,
                                  BLOCK_V: tl.constexpr):
    """dx[row] = (exp(x[row] - lse[row]) - onehot(t[row])) * dloss[row]: program `row` walks its row in
    tiles of BLOCK_V columns, once, the arithmetic in fp32."""
    row = tl.program_id(axis=0)
    target = tl.load(t_ptr + row)
    lse = tl.load(lse_ptr + row)
    dloss = tl.load(dloss_ptr + row)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)       # the row's column numbers, not the tile's lanes
        mask = cols < V
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        p = tl.exp(x - lse)                        # softmax(x), recomputed from the stored lse: at most 1
        dx = (p - tl.where(cols == target, 1.0, 0.0)) * dloss
        tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def onehot_by_lane(x_ptr, t_ptr, lse_ptr, dloss_ptr, dx_ptr, V, stride_xm, stride_dxm, BLOCK_V: tl.constexpr):
    row = tl.program_id(axis=0)
    target = tl.load(t_ptr + row)
    lse = tl.load(lse_ptr + row)
    dloss = tl.load(dloss_ptr + row)
    for start in range(0, V, BLOCK_V):
        lanes = tl.arange(0, BLOCK_V)
        cols = start + lanes
        mask = cols < V
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        dx = (tl.exp(x - lse) - tl.where(lanes == target, 1.0, 0.0)) * dloss  # the lane, not the column
        tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def exp_over_exp(x_ptr, t_ptr, lse_ptr, dloss_ptr, dx_ptr, V, stride_xm, stride_dxm, BLOCK_V: tl.constexpr):
    row = tl.program_id(axis=0)
    target = tl.load(t_ptr + row)
    lse = tl.load(lse_ptr + row)
    dloss = tl.load(dloss_ptr + row)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = cols < V
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        p = tl.exp(x) / tl.exp(lse)                # inf / inf once the logits pass 88
        dx = (p - tl.where(cols == target, 1.0, 0.0)) * dloss
        tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def without_dloss(x_ptr, t_ptr, lse_ptr, dloss_ptr, dx_ptr, V, stride_xm, stride_dxm, BLOCK_V: tl.constexpr):
    row = tl.program_id(axis=0)
    target = tl.load(t_ptr + row)
    lse = tl.load(lse_ptr + row)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = cols < V
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        dx = tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)  # the gradient from above left out
        tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def last_tile_missed(x_ptr, t_ptr, lse_ptr, dloss_ptr, dx_ptr, V, stride_xm, stride_dxm, BLOCK_V: tl.constexpr):
    row = tl.program_id(axis=0)
    target = tl.load(t_ptr + row)
    lse = tl.load(lse_ptr + row)
    dloss = tl.load(dloss_ptr + row)
    for start in range(0, V - BLOCK_V, BLOCK_V):  # stops one tile early (none at all when V <= BLOCK_V)
        cols = start + tl.arange(0, BLOCK_V)
        mask = cols < V
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        dx = (tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)) * dloss
        tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def x_stride_for_dx(x_ptr, t_ptr, lse_ptr, dloss_ptr, dx_ptr, V, stride_xm, stride_dxm, BLOCK_V: tl.constexpr):
    row = tl.program_id(axis=0)
    target = tl.load(t_ptr + row)
    lse = tl.load(lse_ptr + row)
    dloss = tl.load(dloss_ptr + row)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = cols < V
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        dx = (tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)) * dloss
        tl.store(dx_ptr + row * stride_xm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)  # x's stride


WRONG = [Wrong("onehot by the tile's lane, not the column", "values", "are wrong",
               dict(cross_entropy_backward_kernel=onehot_by_lane)),
         Wrong("exp(x) / exp(lse)", "values", "logits near 100", dict(cross_entropy_backward_kernel=exp_over_exp)),
         Wrong("dloss left out", "values", "are wrong", dict(cross_entropy_backward_kernel=without_dloss)),
         Wrong("range(0, V - BLOCK_V, BLOCK_V)", "memory", "left unwritten",
               dict(cross_entropy_backward_kernel=last_tile_missed)),
         Wrong("x's row stride for dx", "memory", "past the end of dx",
               dict(cross_entropy_backward_kernel=x_stride_for_dx))]
