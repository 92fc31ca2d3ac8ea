"""SPOILER: the solution of exercise 4.6 (the gated MLP), and wrong ones the tests check the checker with."""
import common.device  # noqa: F401
import triton
import triton.language as tl

from common.exercise import Wrong, patched


GIVEN = "330a57bfc5e0"  # common.exercise.given_fingerprint of swiglu_mlp.py as the course ships it


@triton.jit
def swiglu_mlp_kernel(x_ptr, w1_ptr, w3_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn,
                      stride_om, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[rows, cols] = silu(x[rows, :] @ W1[:, cols]) * (x[rows, :] @ W3[:, cols]); W1 and W3 share strides."""
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)

    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # x @ W1, the gate
    acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # x @ W3
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        ks = step * BLOCK_K + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)  # once, for both products
        w_offsets = ks[:, None] * stride_wk + cols[None, :] * stride_wn
        w_mask = (ks[:, None] < K) & (cols[None, :] < N)
        w1 = tl.load(w1_ptr + w_offsets, mask=w_mask, other=0.0)
        w3 = tl.load(w3_ptr + w_offsets, mask=w_mask, other=0.0)
        acc1 = tl.dot(x, w1, acc1, input_precision="ieee")
        acc3 = tl.dot(x, w3, acc3, input_precision="ieee")
    out = acc1 * tl.sigmoid(acc1) * acc3

    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, out.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


# The mistakes, each an edit of the solution above (common.exercise.patched)
W3 = "        w3 = tl.load(w3_ptr + w_offsets, mask=w_mask, other=0.0)\n"
DOT1 = '        acc1 = tl.dot(x, w1, acc1, input_precision="ieee")\n'
SECOND_LOOP = ("    for step in range(0, tl.cdiv(K, BLOCK_K)):  # ... then the other: x read a second time\n"
               "        ks = step * BLOCK_K + tl.arange(0, BLOCK_K)\n"
               "        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,\n"
               "                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)\n"
               "        w_offsets = ks[:, None] * stride_wk + cols[None, :] * stride_wn\n"
               "        w_mask = (ks[:, None] < K) & (cols[None, :] < N)\n")
X_LOAD = ("x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,\n"
          "                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)")
X_ATOMIC = ("x = tl.atomic_add(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk, 0.0,\n"
            "                          mask=(rows[:, None] < M) & (ks[None, :] < K))  # a read the loads' count missed")
WRONG = [Wrong("two K loops", "budget", "x was read",  # the loop ended after x @ W1, a second one for x @ W3
               dict(swiglu_mlp_kernel=patched(swiglu_mlp_kernel, (W3 + DOT1, DOT1 + SECOND_LOOP + W3)))),
         Wrong("two K loops, the second reading x through tl.atomic_add(x, 0)", "memory", "runs an atomic on x, an input",
               dict(swiglu_mlp_kernel=patched(swiglu_mlp_kernel,
                                              (W3 + DOT1, DOT1 + SECOND_LOOP.replace(X_LOAD, X_ATOMIC) + W3)))),
         Wrong("the gate on x @ W3", "values", "are wrong",
               dict(swiglu_mlp_kernel=patched(swiglu_mlp_kernel, ("out = acc1 * tl.sigmoid(acc1) * acc3",
                                                                  "out = acc1 * acc3 * tl.sigmoid(acc3)")))),
         Wrong("W unmasked on K", "memory", "past the end of w1",
               dict(swiglu_mlp_kernel=patched(swiglu_mlp_kernel, ("w_mask = (ks[:, None] < K) & (cols[None, :] < N)",
                                                                  "w_mask = cols[None, :] < N"))))]
