"""Lesson 4's op: matmul(a, b), C = activation(A @ B), forward and backward.

A program owns a BLOCK_M x BLOCK_N tile of C and walks K in steps of BLOCK_K: each step loads a
tile of A and a tile of B once and multiplies them in one tl.dot, into an fp32 accumulator that
stays on chip; an activation is applied to the accumulator before the one store (a fused epilogue:
lesson 1's GELU, reused through lesson 1's op file). The backward is two more matmuls, on views
with the strides swapped. main.py, the chapter, explains each step (the plan, grouped order, the
trace, autotuning), checks and times it; this file is what a model imports.

The op has the course's one shape: matmul() checks its input and asks choose_kernel, the route,
which kernel runs (this file's pointer kernel, or hopper.py's TMA kernel); Matmul (an autograd
function) says what the forward launches and what the backward computes; launch() runs
`kernel[grid](...)`.
"""
from common.device import INTERPRET, interpretable  # first: it decides how triton is imported

import torch
import triton
import triton.language as tl

from common.checks import check_tensors, flag, index_type as index_type_of
from common.launch import cdiv, traced_config
from common.tuned import recorded
from common.trace import show
from lesson01_vector_add.elementwise import gelu_tanh, gelu_tanh_grad  # lesson 1's GELU and its derivative
from lesson04_matmul import hopper  # the TMA kernel, one of the route's two paths

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ACTIVATIONS = (None, "relu", "gelu")


# %% The kernel
@triton.jit
def grouped_pid(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """The tile (pid_m, pid_n) of program `pid`: GROUP_M tile rows at a time, down the columns
    (main.py, section 3, says why)."""
    num_pid_in_group = GROUP_M * num_pid_n          # programs per group: GROUP_M full tile rows
    group_id = pid // num_pid_in_group              # which group this program is in
    first_pid_m = group_id * GROUP_M                # the group's first tile row
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)  # the last group may have fewer rows
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m  # down a column of the group ...
    pid_n = (pid % num_pid_in_group) // group_size_m               # ... then one column right
    return pid_m, pid_n


# Element (i, j) of A lives at a_ptr + i * stride_am + j * stride_ak, so a transposed view (the
# strides swapped) needs no copy. Masks on all three dimensions pad the ragged edges with 0, which
# adds nothing to a sum. The accumulator is fp32 whatever the inputs; float32 inputs multiply in TF32
# unless INPUT_PRECISION = "ieee" (main.py, section 4).
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,            # A (M, K), B (K, N), C (M, N)
    M, N, K,
    stride_am, stride_ak,           # elements between rows / columns of A
    stride_bk, stride_bn,           # ... of B
    stride_cm, stride_cn,           # ... of C
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,  # the tile of C, the K step
    GROUP_M: tl.constexpr,          # tile rows per group (main.py, section 3); 1 is row-major order
    ACTIVATION: tl.constexpr = "",  # "", "relu" or "gelu": applied to the tile before the store; or
    g_ptr=None,                     # "gelu_backward" (main.py, section 9): C = g * gelu'(A @ B), g contiguous, C's shape
    INPUT_PRECISION: tl.constexpr = "tf32",  # float32 inputs: "tf32" (tensor cores) or "ieee"
    INDEX_TYPE: tl.constexpr = tl.int32,     # of the offsets: int64 past 2**31 elements (common.checks.index_type)
    TRACE: tl.constexpr = False,
):
    # Which tile of C is mine? (grouped order)
    pid = tl.program_id(axis=0)
    pid_m, pid_n = grouped_pid(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rows = pid_m.to(INDEX_TYPE) * BLOCK_M + tl.arange(0, BLOCK_M)  # its rows of C (and of A)
    cols = pid_n.to(INDEX_TYPE) * BLOCK_N + tl.arange(0, BLOCK_N)  # its columns of C (and of B)
    if TRACE:
        show("program (pid_m, pid_n)", (pid_m, pid_n), indent=0)
        show("rows kept", tl.sum((rows < M).to(tl.int32), axis=0))
        show("cols kept", tl.sum((cols < N).to(tl.int32), axis=0))
    # The K loop: one tile of A and one of B per step, multiplied and added into acc.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        ks = (step * BLOCK_K + tl.arange(0, BLOCK_K)).to(INDEX_TYPE)
        a_offsets = rows[:, None] * stride_am + ks[None, :] * stride_ak   # A[rows, ks]
        b_offsets = ks[:, None] * stride_bk + cols[None, :] * stride_bn   # B[ks, cols]
        a_mask = (rows[:, None] < M) & (ks[None, :] < K)
        b_mask = (ks[:, None] < K) & (cols[None, :] < N)
        a = tl.load(a_ptr + a_offsets, mask=a_mask, other=0.0)
        b = tl.load(b_ptr + b_offsets, mask=b_mask, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)  # acc += a @ b, on the tensor cores
        if TRACE:
            show("round", step + 1, indent=2)
            show("ks kept", tl.sum((ks < K).to(tl.int32), axis=0))
            if BLOCK_K <= 4:  # tiny tiles: print them whole
                show("a offsets", a_offsets)
                show("a tile", a)
                show("b tile", b)
                show("acc", acc)
    # The epilogue: acc is still on chip, so an activation costs no memory traffic at all.
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)  # NaN stays NaN, as in torch.relu
    if ACTIVATION == "gelu":
        acc = gelu_tanh(acc)
    c_offsets = rows[:, None] * stride_cm + cols[None, :] * stride_cn
    c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    if ACTIVATION == "gelu_backward":  # the backward's dL/dZ = dL/dC * gelu'(Z), Z = A @ B still on chip
        g = tl.load(g_ptr + rows[:, None] * N + cols[None, :], mask=c_mask, other=0.0)
        acc = g.to(tl.float32) * gelu_tanh_grad(acc)
    # One store of the tile, masked at the edges of C, rounded to C's dtype.
    tl.store(c_ptr + c_offsets, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


# %% Autotuning (main.py, section 6): tiles that do well on Hopper, 3-4 pipeline stages
GPU_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=stages,
                             num_warps=warps) for bm, bn, stages, warps in [
    (128, 256, 3, 8), (256, 128, 3, 8), (128, 256, 4, 8), (128, 128, 4, 8), (128, 128, 4, 4), (64, 128, 4, 4),
    (128, 64, 4, 4), (64, 64, 4, 4)]]  # the last fits every GPU from a T4 up, even in float32 (96 KB)
CONFIGS = GPU_CONFIGS if not INTERPRET else [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 4})]


def small_problems_untuned(configs, named_args, **kwargs):
    """Autotune's early prune: every configuration from 512^3 up, below it the last one alone."""
    return configs if named_args["M"] * named_args["N"] * named_args["K"] >= 512**3 else configs[-1:]


# cache_results: the choice per shape kept on disk too (Triton's cache), so a second run starts with it;
# recorded: the choices of a run on this GPU model, if the course has one (common/tuned.py), so a first does.
matmul_kernel_tuned = recorded("matmul_kernel_tuned", triton.autotune(
    CONFIGS, key=["M", "N", "K"], cache_results=True,
    prune_configs_by={"early_config_prune": small_problems_untuned})(matmul_kernel))


def pointer_kernel(dtype: torch.dtype) -> tuple:
    """(kernel, its block sizes) for the pointer path: the autotuned kernel, or, while torch.compile
    traces, matmul_kernel with one configuration (common.launch.traced_config says why)."""
    if torch.compiler.is_compiling():
        return matmul_kernel, traced_config(CONFIGS, dtype)
    return matmul_kernel_tuned, {}


# %% The launcher
def launch(kernel, a, b, activation=None, precision="tf32", index_type=None, grad=None, out_dtype=None,
           **meta) -> torch.Tensor:
    """activation(a @ b) by `kernel`: matmul_kernel with its block sizes in `meta`, or the autotuned
    matmul_kernel_tuned, which picks them; for a and b as matmul() checked them. index_type: of the
    kernel's offsets, tl.int32 or tl.int64; by default the one these tensors need. activation
    "gelu_backward" (the backward's): grad * gelu'(a @ b), grad contiguous, of C's shape. out_dtype: C's
    (by default the inputs'; float32 keeps the accumulator's bits)."""
    (M, K), N = a.shape, b.shape[1]
    c = a.new_empty((M, N), dtype=out_dtype)
    a, b = interpretable(a), interpretable(b)  # (bf16 as fp32 under the interpreter)
    if index_type is None:
        index_type = index_type_of(a, b, c)
    grad = interpretable(grad) if grad is not None else None

    def grid(meta):  # meta: the block sizes in use, given here or picked by the autotuner
        return (cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]),)  # one program per tile of C

    if M and N:  # (K = 0 is fine: the K loop runs no rounds, and the epilogue sees A @ B = 0)
        meta = {"TRACE": False, **meta}  # every argument, defaults too: torch.compile's analysis wants them all
        kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     ACTIVATION=activation or "", g_ptr=grad, INPUT_PRECISION=precision, INDEX_TYPE=index_type,
                     **meta)
    return c


# %% The route: which kernel computes a @ b
def choose_kernel(a, b, tma: bool | None = None, *, gpu_has_tma: bool | None = None) -> str:
    """"tma" (hopper.py's TMA kernel on a persistent grid) or "pointer" (matmul_kernel_tuned), asked
    in this order (main.py prints it as a table, an example of each):
    1. tma=False: the pointer kernel.
    2. tma=True: the TMA kernel, where it can run (hopper.check_tma raises, with the reason, where not).
    3. a GPU with TMA (hopper.HOPPER: Hopper or newer, with the shared memory of its tiles),
       float16 or bfloat16, M * N * K >= hopper.TMA_FROM (hopper.py says why there), operands the copy engine
       can address as they lie, rows or columns contiguous (hopper.tma_ok): the TMA kernel.
    4. anything else: the pointer kernel.
    The same under torch.compile, which reads the alignment from the operands' storage offsets
    (hopper.starts_aligned). The backward asks again for each of its products, dA = dC @ B^T and
    dB = A^T @ dC (transposed views: the TMA kernel reads them as they lie), unless tma=False.
    gpu_has_tma says what this machine is (by default, what it is now); the chapter and the tests
    pass it to ask what another would choose."""
    if tma is False:
        return "pointer"
    gpu_has_tma = hopper.HOPPER if gpu_has_tma is None else gpu_has_tma
    if tma:
        hopper.check_tma(a, b, gpu_has_tma=gpu_has_tma)
        return "tma"
    (M, K), N = a.shape, b.shape[1]
    if gpu_has_tma and a.dtype != torch.float32 and M * N * K >= hopper.TMA_FROM and hopper.tma_ok(a, b, N):
        return "tma"
    return "pointer"


def backward_takes_tma(tma: bool | None, x, y) -> bool:
    """The route for one of the backward's products, x @ y: with tma=False never the TMA kernel,
    with tma=True wherever it can address x and y, with None where choose_kernel takes it."""
    if tma is False:
        return False
    if tma and (INTERPRET or hopper.HOPPER) and x.dtype != torch.float32 and hopper.tma_ok(x, y, y.shape[1]):
        return True
    return choose_kernel(x, y) == "tma"


def transposed(t) -> bool:
    """Is the 2-D t a transposed view (its columns contiguous, not its rows)?"""
    return t.stride(0) == 1 and t.stride(1) != 1


# %% The autograd function and the op
class Matmul(torch.autograd.Function):
    """C = act(A @ B). dL/dA = dL/dC @ B^T and dL/dB = A^T @ dL/dC: two more products, on B^T and
    A^T, views with the strides swapped (no copy), each taking the kernel the route chooses for it
    (the pointer kernel follows any strides; the TMA kernel reads a transposed operand as it lies).
    With an activation, dL/dZ = dL/dC * act'(Z) for Z = A @ B comes first: relu' is 1 where C > 0,
    so C itself tells; gelu' needs Z, which the fused kernel never wrote, so the backward recomputes
    it (one more matmul, by the forward's kernel) rather than keep an M x N tensor from forward to
    backward, and multiplies dL/dC by gelu'(Z) in that matmul's epilogue (lesson 1's gelu_tanh_grad):
    Z never leaves the chip."""

    @staticmethod
    def forward(ctx, a, b, activation, precision, tma_flag):
        ctx.b_dtype = b.dtype
        b = b.to(a.dtype)  # a float32 weight in a's dtype for the product (b itself where it is already)
        tma = choose_kernel(a, b, tma_flag) == "tma"  # the route, on the tensors the kernel reads
        if tma:
            c = hopper.launch_tma(hopper.matmul_kernel_tma, a, b, activation,
                                  **hopper.config(a.shape[0], b.shape[1], a.shape[1], activation=activation))
        else:
            kernel, meta = pointer_kernel(a.dtype)
            c = launch(kernel, a, b, activation, precision, **meta)
        ctx.activation, ctx.precision, ctx.tma, ctx.tma_flag = activation, precision, tma, tma_flag
        if activation == "relu":
            ctx.save_for_backward(a, b, c)  # saved tensors: autograd checks they were not changed in place
        else:
            ctx.save_for_backward(a, b)
        return c

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors[:2]
        kernel, meta = pointer_kernel(a.dtype)

        def backward_product(x, y, out_dtype=None):  # x @ y by the kernel the route takes (tma=False: never TMA)
            out_dtype = None if out_dtype == x.dtype else out_dtype  # (C in the inputs' dtype: None, config()'s key)
            if backward_takes_tma(ctx.tma_flag, x, y):
                return hopper.launch_tma(hopper.matmul_kernel_tma, x, y, out_dtype=out_dtype,
                                         **hopper.config(x.shape[0], y.shape[1], x.shape[1], out_dtype=out_dtype))
            return launch(kernel, x, y, None, ctx.precision, out_dtype=out_dtype, **meta)

        if ctx.activation == "relu":
            dc = torch.where(ctx.saved_tensors[2] > 0, dc, 0)
        elif ctx.activation == "gelu":  # Z recomputed as the forward computed it, dC * gelu'(Z) in its epilogue
            if ctx.tma:
                dc = hopper.launch_tma(hopper.matmul_kernel_tma, a, b, "gelu_backward", grad=dc.contiguous(),
                                       **hopper.config(a.shape[0], b.shape[1], a.shape[1], activation="gelu_backward"))
            else:
                dc = launch(kernel, a, b, "gelu_backward", ctx.precision, grad=dc.contiguous(), **meta)
        da = db = None
        # ctx.needs_input_grad says which inputs want a gradient: a frozen weight's dB is never computed.
        # Each gradient comes out laid out as its input is (as PyTorch's mm backward does): for a
        # transposed view, its transpose is computed and returned as a view. A linear layer's B is
        # W^T, so W's gradient lies as W does, and autograd adds it to W.grad with no copy.
        if ctx.needs_input_grad[0]:  # dA = dC @ B^T: (M, N) @ (N, K)
            da = backward_product(b, dc.t()).t() if transposed(a) else backward_product(dc, b.t())
        if ctx.needs_input_grad[1]:  # dB = A^T @ dC: (K, M) @ (M, N), a sum over the M rows
            # (a float32 weight's gradient in float32, straight from the float32 accumulator: no cast)
            if transposed(b):
                db = backward_product(dc.t(), a, ctx.b_dtype).t()
            else:
                db = backward_product(a.t(), dc, ctx.b_dtype)
        return da, db, None, None, None  # none for activation, precision, tma_flag


def matmul(a: torch.Tensor, b: torch.Tensor, *, activation: str | None = None, precision: str = "tf32",
           tma: bool | None = None) -> torch.Tensor:
    """C = activation(a @ b) for 2-D a (M, K), b (K, N): float16, bfloat16 or float32, any strides;
    fp32 accumulation, output in a's dtype. activation: None, "relu" or "gelu" (tanh form).
    b may be float32 where a is float16 or bfloat16 (mixed precision's float32 weight): it is cast to
    a's dtype for the product, and its gradient comes back in float32, written by the kernel from its
    float32 accumulator (autocast would cast the weight, then launch another cast for its gradient).
    precision, for float32 on a GPU: "tf32" (tensor cores, 10-bit mantissa) or "ieee" (full fp32, slower).
    tma: None lets choose_kernel pick (hopper.py's TMA kernel where it can run and pays, under
    torch.compile too), True insists on it (the backward's products take it too, wherever it can
    address them), False never."""
    if isinstance(b, torch.Tensor) and b.dtype == torch.float32 and isinstance(a, torch.Tensor) and a.dtype in (
            torch.float16, torch.bfloat16):  # a float32 weight: each checked in its own dtype, on one device
        (a,), (b,) = check_tensors({"a": a}, DTYPES, ndim=2), check_tensors({"b": b}, DTYPES, ndim=2)
        if a.device != b.device:
            raise ValueError(f"a, b are on different devices: {a.device}, {b.device}")
    else:
        a, b = check_tensors({"a": a, "b": b}, DTYPES, ndim=2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} "
                         f"({a.shape[1]} != {b.shape[0]})")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if precision not in ("tf32", "ieee"):
        raise ValueError(f"precision must be 'tf32' or 'ieee', got {precision!r}")
    tma = flag("tma", tma, optional=True)
    return Matmul.apply(a, b, activation, precision, tma)
