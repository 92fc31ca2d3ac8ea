"""Inputs real users pass, tried on all six public functions: tensors that require grad (they get
gradients), views with
PyTorch's negative bit, offsets past 2^31, grids past 65535 programs, flags that are not booleans,
block sizes that are not powers of two, and command lines with bad sizes.

The tensors past 2^31 elements need a GPU's memory (4 to 13 GB each): those tests run on a GPU only,
one at a time (`pytest -n 0 -m big`: pytest.ini's -n auto would run them side by side). Under the
interpreter, views whose row stride is 2^30 take the same 64-bit path while touching a few pages of
a large virtual allocation."""
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import triton.language as tl

from conftest import DEVICE, INTERPRET
from common import checks
from common.checks import index_type, rel_error
import lesson01_vector_add.main as lesson01
import lesson02_softmax.main as lesson02
import lesson03_rowsum.main as lesson03
import lesson04_matmul.main as lesson04
import lesson05_flash_attention.main as lesson05
from lesson01_vector_add.elementwise import add, gelu
from lesson02_softmax.softmax import softmax
from lesson03_rowsum.main import row_sum
from lesson04_matmul.matmul import matmul
from lesson05_flash_attention.attention import attention


def sdpa(q, k, v, causal=False):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)


# name: (function, shapes of its inputs, a float64 reference)
FUNCTIONS = {
    "add": (add, [(5, 7), (5, 7)], torch.add),
    "gelu": (gelu, [(5, 7)], lambda x: F.gelu(x, approximate="tanh")),
    "softmax": (softmax, [(5, 7)], lambda x: torch.softmax(x, dim=1)),
    "row_sum": (row_sum, [(5, 7)], lambda x: x.sum(dim=1)),
    "matmul": (matmul, [(5, 7), (7, 3)], torch.matmul),
    "attention": (attention, [(1, 2, 5, 16)] * 3, sdpa),
}
TOLERANCE = 2e-3  # float32; matmul on a GPU multiplies in TF32


@pytest.mark.parametrize("name", FUNCTIONS)
def test_inputs_that_require_grad_get_gradients(name):
    fn, shapes, reference = FUNCTIONS[name]
    inputs = [torch.randn(shape, device=DEVICE) for shape in shapes]
    leaves = [x.clone().requires_grad_() for x in inputs]
    out = fn(*leaves)
    assert out.grad_fn is not None  # through its autograd function (lesson 1, section 5)
    g = torch.randn_like(out)  # not ones: softmax's rows sum to 1, whose gradient is 0
    out.backward(g)
    exact = [x.double().requires_grad_() for x in inputs]
    reference(*exact).backward(g.double())
    assert all(rel_error(a.grad, b.grad) < TOLERANCE for a, b in zip(leaves, exact))
    with torch.no_grad():  # inference: no graph, the launcher directly
        assert fn(*leaves).grad_fn is None


@pytest.mark.parametrize("name", FUNCTIONS)
def test_negative_bit_views_are_read_as_their_values(name):
    fn, shapes, reference = FUNCTIONS[name]
    inputs = [torch.randn(shape, dtype=torch.complex64, device=DEVICE).conj().imag for shape in shapes]
    assert all(x.is_neg() for x in inputs)  # the memory holds -x; PyTorch negates lazily
    assert rel_error(fn(*inputs), reference(*(x.resolve_neg().double() for x in inputs))) < TOLERANCE


def test_index_type_is_64_bit_only_where_needed():
    meta = dict(device="meta", dtype=torch.float16)  # shapes and strides, no memory
    assert index_type(torch.empty(4096, 32768, **meta)) == tl.int32
    assert index_type(torch.empty(65544, 32768, **meta)) == tl.int64             # last row at 2^31 + 229376
    assert index_type(torch.empty(65544, 32768, **meta).t()) == tl.int64         # a view: the same memory
    assert index_type(torch.empty_strided((2, 4), (2**30, 1), **meta)) == tl.int32  # offset 2^30 + 3
    assert index_type(torch.empty_strided((3, 4), (2**30, 1), **meta)) == tl.int64  # 2^31 + 3
    assert index_type(torch.empty(1, 2**31 - 2**15, **meta)) == tl.int64           # indices near 2^31
    assert index_type(torch.empty(0, 2**20, **meta), torch.empty(5, **meta)) == tl.int32
    # the boundary itself: a farthest offset of 2^31 - 1 still fits int32, 2^31 does not
    assert index_type(torch.empty_strided((2, 1), (2**31 - 1, 1), **meta)) == tl.int32
    assert index_type(torch.empty_strided((2, 1), (2**31, 1), **meta)) == tl.int64
    assert index_type(torch.empty_strided((2, 2), (2**31 - 2, 1), **meta)) == tl.int32  # 2^31 - 2 + 1
    assert index_type(torch.empty_strided((2, 3), (2**31 - 2, 1), **meta)) == tl.int64  # 2^31 - 2 + 2


def far_apart(rows, cols, dtype=torch.float32):
    """A (rows, cols) view whose rows are 2^30 elements apart: offsets past 2^31 from the third row on,
    in a virtual allocation of which only the view's pages are touched."""
    x = torch.empty_strided((rows, cols), (2**30, 1), device=DEVICE, dtype=dtype)
    return x.normal_()


@pytest.mark.skipif(not INTERPRET, reason="the GPU versions of these cases are test_past_2_31_on_a_gpu")
def test_offsets_past_2_31_under_the_interpreter():
    x = far_apart(3, 20)
    for long_rows in (False, True):
        assert rel_error(softmax(x, long_rows=long_rows), torch.softmax(x.double(), dim=1)) < 1e-6
    for splits in (1, 2):
        assert rel_error(row_sum(x, splits=splits), x.double().sum(dim=1)) < 1e-6
    w = torch.randn(20, 8, device=DEVICE)
    assert rel_error(matmul(x, w), x.double() @ w.double()) < 1e-6
    assert rel_error(matmul(w.t(), x.t()), w.t().double() @ x.t().double()) < 1e-6  # B's columns 2^30 apart
    q = far_apart(3, 16).view(1, 1, 3, 16)
    k, v = torch.randn(2, 1, 1, 3, 16, device=DEVICE)
    for causal in (False, True):
        assert rel_error(attention(q, k, v, causal=causal), sdpa(q, k, v, causal)) < 1e-6
    # head dimensions 2^27 elements apart: (32 - 1) x 2^27 > 2^31, with short rows (float16: 8 GB virtual)
    k = torch.empty_strided((1, 1, 4, 32), (4, 4, 1, 2**27), device=DEVICE, dtype=torch.float16).normal_()
    q, v = torch.randn(2, 1, 1, 4, 32, device=DEVICE, dtype=torch.float16)
    assert rel_error(attention(q, k, v), sdpa(q, k, v)) < 2e-3


@pytest.mark.big
@pytest.mark.skipif(INTERPRET, reason="needs a GPU with 30 GB free: tensors past 2^31 elements")
def test_past_2_31_on_a_gpu():
    # softmax of a vocabulary-sized batch: 65544 x 32768 float16 (4.3 GB); the last rows are past 2^31
    x = torch.randn(65544, 32768, device=DEVICE, dtype=torch.float16)
    ref = torch.softmax(x[-4:].float(), dim=1)
    for long_rows in (False, True):
        assert (softmax(x, long_rows=long_rows)[-4:].float() - ref).abs().max() < 2**-11
    del x
    # row_sum of 3 rows of 2^30 + 16 floats (12.9 GB): rows 2 and 3 start past 2^31
    x = torch.randn(3, 2**30 + 16, device=DEVICE)
    ref = x.sum(dim=1, dtype=torch.float64)
    for splits in (1, None):  # splits=1 first: a fresh output, with nothing left in its memory to pass by luck
        assert ((row_sum(x, splits=splits) - ref).abs() / x.abs().sum(dim=1)).max() < 1e-6
    del x
    # matmul of (2^21 + 32) x 1024 by 1024 x 64: float32 (8.6 GB) takes the pointer kernel; float16
    # takes TMA on Hopper (coordinates, not offsets) unless told otherwise
    for dtype, tma in ((torch.float32, None), (torch.float16, False), (torch.float16, None)):
        a = torch.randn(2**21 + 32, 1024, device=DEVICE, dtype=dtype)
        b = torch.randn(1024, 64, device=DEVICE, dtype=dtype)
        c = matmul(a, b, tma=tma)
        assert rel_error(c[-100:], a[-100:].double() @ b.double()) < 2e-3
        del a, b, c
    # attention over a (batch, seq, heads, head_dim) tensor read as (batch, heads, seq, head_dim):
    # 8192 heads x 64 dims between two rows, so row 4096 of a head is at offset 2^31
    base = torch.randn(3, 1, 4608, 8192, 64, device=DEVICE, dtype=torch.float16)  # 14.5 GB
    q, k, v = base[:, :, :, :2].transpose(2, 3)  # (1, 2, 4608, 64) each, row stride 2^19
    for causal in (False, True):
        assert rel_error(attention(q, k, v, causal=causal), sdpa(q, k, v, causal)) < 2e-3
    del base, q, k, v
    # attention with 129 x 1024 (batch, head) pairs of 256 x 64 (4.3 GB each): the last batch starts past 2^31
    q, k, v = torch.randn(3, 129, 1024, 256, 64, device=DEVICE, dtype=torch.float16)
    o = attention(q, k, v)
    assert rel_error(o[-1, -4:], sdpa(q[-1:, -4:], k[-1:, -4:], v[-1:, -4:])[0]) < 2e-3


@pytest.mark.big
@pytest.mark.skipif(INTERPRET, reason="70000 programs per launch: minutes under the interpreter")
def test_grids_past_65535_programs():
    # CUDA allows 65535 programs along grid axes 1 and 2: both kernels number theirs along axis 0
    q, k, v = torch.randn(3, 7, 10000, 16, 16, device=DEVICE, dtype=torch.float16).requires_grad_().unbind()
    o = attention(q, k, v)  # 70000 heads, forward and backward
    assert rel_error(o, sdpa(q, k, v)) < 2e-3
    g = torch.randn_like(o)
    grads = torch.autograd.grad(o, (q, k, v), g)
    exact = torch.autograd.grad(sdpa(q, k, v), (q, k, v), g.double())
    for ours, ref in zip(grads, exact):
        assert rel_error(ours, ref) < 5e-3
    x = torch.randn(2, 70000 * 4096, device=DEVICE)  # 70000 programs per row
    assert ((row_sum(x, splits=70000) - x.sum(dim=1, dtype=torch.float64)).abs() / x.abs().sum(dim=1)).max() < 1e-6


def test_flags_and_block_sizes_are_checked():
    x = torch.randn(4, 8, device=DEVICE)
    q = torch.randn(1, 1, 4, 16, device=DEVICE)
    cases = [
        # flags: a bool or numpy's bool_, never 0 or 1.0 (which `in (True, False)` lets through) or a string
        (lambda: softmax(x, long_rows="no"), TypeError, "long_rows must be None, True or False, got 'no'"),
        (lambda: softmax(x, long_rows=0), TypeError, "long_rows must be None, True or False, got 0"),
        (lambda: attention(q, q, q, causal="False"), TypeError, "causal must be True or False, got 'False'"),
        (lambda: attention(q, q, q, causal=1.0), TypeError, "causal must be True or False, got 1.0"),
        (lambda: matmul(x, x.t(), tma="no"), TypeError, "tma must be None, True or False"),
        # SDPA's positional habits: a mask or a dropout probability in fourth place
        (lambda: attention(q, q, q, torch.ones(4, 4, dtype=torch.bool)), TypeError,
         "attention takes no attn_mask \\(got Tensor\\): its one mask is causal=True, a keyword"),
        (lambda: attention(q, q, q, 1.0), TypeError, "attention takes no attn_mask \\(got float\\)"),
        (lambda: attention(q, q, q, sm_scale=float("nan")), ValueError, "sm_scale must be finite, got nan"),
        (lambda: attention(q, q, q, sm_scale=float("inf")), ValueError, "sm_scale must be finite, got inf"),
        (lambda: attention(q, q, q, sm_scale="0.5"), TypeError, "sm_scale must be a real number, got '0.5'"),
        (lambda: softmax(x, 2), IndexError, "dim must be in \\[-2, 1\\] for a 2-D tensor, got 2"),
        (lambda: softmax(x, 1.0), TypeError, "dim must be a whole number >= -2, got 1.0"),
        # integer knobs: any integral scalar, never a bool, a string or a float
        (lambda: row_sum(x, splits="4"), TypeError, "splits must be a whole number >= 1, got '4'"),
        (lambda: row_sum(x, splits=True), TypeError, "splits must be a whole number >= 1, got True"),
        (lambda: row_sum(x, splits=2.0), TypeError, "splits must be a whole number >= 1, got 2.0"),
        (lambda: row_sum(x, splits=0), ValueError, "splits must be a whole number >= 1, got 0"),
        (lambda: add(x, x, BLOCK_SIZE=0), ValueError, "BLOCK_SIZE must be a power of two from 1 to 65536, got 0"),
        (lambda: add(x, x, BLOCK_SIZE=1000), ValueError, "BLOCK_SIZE must be a power of two .* got 1000"),
        (lambda: gelu(x, BLOCK_SIZE="1024"), TypeError, "BLOCK_SIZE must be a power of two .* got '1024'"),
        (lambda: gelu(x, num_warps=3), ValueError, "num_warps must be a power of two from 1 to 32, got 3"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert torch.equal(add(x, x, BLOCK_SIZE=1, num_warps=1), x + x)


def test_flags_and_knobs_from_numpy_and_torch_are_taken_as_theirs():
    # a numpy bool is a bool, a numpy or torch integer an integer: they work as the Python ones do
    x = torch.randn(4, 8, device=DEVICE)
    q, k, v = (torch.randn(1, 2, 5, 16, device=DEVICE) for _ in range(3))
    assert torch.equal(attention(q, k, v, causal=np.True_), attention(q, k, v, causal=True))
    assert torch.equal(softmax(x, long_rows=np.False_), softmax(x, long_rows=False))
    assert torch.equal(row_sum(x, splits=np.int64(2)), row_sum(x, splits=2))
    assert torch.equal(row_sum(x, splits=torch.tensor(2)), row_sum(x, splits=2))
    assert torch.equal(add(x, x, BLOCK_SIZE=np.int32(256), num_warps=torch.tensor(2)), x + x)
    assert torch.equal(attention(q, k, v, sm_scale=np.float32(0.25)), attention(q, k, v, sm_scale=0.25))


def test_softmax_takes_dim_as_torch_softmax_does():
    # softmax(x, 0), the torch.softmax habit, is the softmax down the columns (once it silently ran
    # along the rows: 0 was taken as long_rows=False), with its gradient
    x = torch.randn(6, 40, device=DEVICE, dtype=torch.float64).float().requires_grad_()
    for dim in (0, 1, -1, -2):
        y = softmax(x, dim)
        assert rel_error(y, torch.softmax(x.double(), dim)) < 1e-6
        g = torch.randn_like(y)
        (dx,) = torch.autograd.grad(y, x, g)
        (ref,) = torch.autograd.grad(torch.softmax(x, dim), x, g)
        assert rel_error(dx, ref) < 1e-5


def test_row_sums_last_program_runs_past_n_in_64_bits():
    from lesson03_rowsum.row_sum import columns_per_program, offset_type

    meta = dict(device="meta")
    x, N = torch.empty(1, 1_500_000_000, **meta), 1_500_000_000  # split in 2: 3 stretches, the last past 2^31
    assert index_type(x) == tl.int32 and offset_type(x, torch.empty(1, 3, **meta), columns_per_program(N, 2)) == tl.int64
    assert offset_type(x, torch.empty(1, **meta), N) == tl.int32  # one program per row: the row's end is N


def test_dimensions_just_under_2_31_are_refused():
    x = torch.zeros(1, device=DEVICE).expand(3, 2**31 - 10)  # no memory; loop bounds would wrap
    for fn in (row_sum, softmax, gelu):
        with pytest.raises(ValueError, match=r"a dimension within 2\*\*16 of 2\*\*31"):
            fn(x)


def test_lesson_one_refuses_past_2_31_elements():
    x = torch.zeros(1, device=DEVICE).expand(2**31)  # 2^31 elements, one float of memory
    with pytest.raises(ValueError, match="2147483648 elements: this kernel's int32 offsets stop near 2"):
        add(x, x)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_other_layouts_get_one_message_style():
    x = torch.randn(4, 8, device=DEVICE)
    nested = torch.nested.nested_tensor([torch.randn(2, 8), torch.randn(3, 8)], layout=torch.jagged).to(DEVICE)
    cases = [(softmax, x.to_sparse_csr(), "x is a sparse_csr tensor; the kernels read dense tensors: use x.to_dense()"),
             (row_sum, x.to_sparse(), "x is a sparse_coo tensor; .* x.to_dense()"),
             (gelu, nested, "x is a nested tensor; .* x.to_dense()"),
             (row_sum, torch.ones(2, 3, device="meta"), "x is on meta: a meta tensor has a shape but no data")]
    for fn, bad, message in cases:
        with pytest.raises(ValueError, match=message):
            fn(bad)


@pytest.mark.parametrize("lesson, argv", [
    (lesson01, ["--sizes", "-5"]), (lesson02, ["--rows", "0"]), (lesson02, ["--sizes", "-1"]),
    (lesson03, ["--shapes", "4x"]), (lesson03, ["--shapes", "4x5x6"]), (lesson03, ["--shapes", "0x100"]),
    (lesson04, ["--sizes", "-64"]), (lesson05, ["--seqs", "-1"])])
def test_bad_sizes_on_the_command_line_are_usage_errors(lesson, argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        lesson.chapter.parser.parse_args(["--sections", "bench", *argv])
    assert exit_.value.code == 2 and "error: argument" in capsys.readouterr().err


@pytest.mark.skipif(INTERPRET, reason="CPU tensors have no device index to check")
def test_a_tensor_off_the_current_device_is_refused(monkeypatch):
    # Triton launches on the current device, whatever device the pointers point to: a tensor on
    # another GPU would be read through the wrong GPU's memory. With one GPU, the current device is
    # moved (as torch.cuda.set_device(1) would); with two, a real tensor on cuda:1.
    x = torch.randn(4, 8, device=DEVICE)
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match="x is on cuda:1, but kernels launch on the current device, cuda:0"):
            softmax(x.to("cuda:1"))
        with torch.cuda.device(1):
            assert torch.equal(softmax(x.to("cuda:1")).cpu(), softmax(x).cpu())
    # two GPUs, the current one the second (with one GPU its tensors are on the current device, and
    # the check asks CUDA nothing)
    monkeypatch.setattr(checks, "GPU_COUNT", 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    for call in (lambda: softmax(x), lambda: add(x, x), lambda: row_sum(x), lambda: matmul(x, x.t())):
        with pytest.raises(ValueError, match=r"is on cuda:0, but kernels launch on the current device, cuda:1: "
                                             r"wrap the call in `with torch.cuda.device\(.*\.device\):`"):
            call()


def sdpa_gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


# (function, its inputs' shapes, torch's): inputs torch accepts with nothing in them
EMPTY = [(matmul, [(0, 7), (7, 3)], torch.matmul), (matmul, [(5, 0), (0, 3)], torch.matmul),
         (matmul, [(5, 7), (7, 0)], torch.matmul), (matmul, [(0, 0), (0, 0)], torch.matmul),
         (attention, [(0, 2, 5, 16), (0, 1, 5, 16), (0, 1, 5, 16)], sdpa_gqa),   # no batch
         (attention, [(1, 0, 5, 16), (1, 0, 5, 16), (1, 0, 5, 16)], sdpa_gqa),   # no heads at all
         (attention, [(1, 0, 5, 16), (1, 1, 5, 16), (1, 1, 5, 16)], sdpa_gqa),   # no query heads
         (attention, [(1, 2, 0, 16), (1, 1, 5, 16), (1, 1, 5, 16)], sdpa_gqa),   # no queries
         (attention, [(1, 2, 5, 16), (1, 1, 0, 16), (1, 1, 0, 16)], sdpa_gqa),   # no keys: zeros
         (attention, [(1, 2, 5, 0), (1, 1, 5, 0), (1, 1, 5, 0)], sdpa_gqa)]      # a head dim of 0


@pytest.mark.parametrize("fn, shapes, reference", EMPTY, ids=[f"{f.__name__}{s}" for f, s, _ in EMPTY])
def test_empty_inputs_give_torchs_result_and_a_backward(fn, shapes, reference):
    inputs = [torch.randn(shape, device=DEVICE, requires_grad=True) for shape in shapes]
    out, ref = fn(*inputs), reference(*[x.detach() for x in inputs])
    assert out.shape == ref.shape and torch.equal(out, ref)  # (empty, or all zeros)
    out.sum().backward()
    assert all(torch.equal(x.grad, torch.zeros_like(x)) for x in inputs)


def test_views_of_any_stride_are_read_as_torch_reads_them():
    # stride 0 (one row or one head expanded), overlapping rows (as_strided), a head dim that is not the
    # last in memory: forward and every gradient against float64 autograd, back through the views
    def check(fn, reference, leaves, views):
        ours = fn(*views(*leaves))
        g = torch.randn(ours.shape, device=DEVICE)
        grads = torch.autograd.grad(ours, leaves, g)
        exact_leaves = [x.detach().double().requires_grad_() for x in leaves]
        exact = reference(*views(*exact_leaves))
        exact_grads = torch.autograd.grad(exact, exact_leaves, g.double())
        assert rel_error(ours, exact) < 1e-5
        assert all(rel_error(a, b) < 1e-5 for a, b in zip(grads, exact_grads))

    leaf = lambda *shape: torch.randn(*shape, device=DEVICE, requires_grad=True)  # noqa: E731
    check(lambda a, b: matmul(a, b, precision="ieee"), torch.matmul, [leaf(1, 7), leaf(20)],
          lambda a, b: (a.expand(5, 7), b.as_strided((7, 3), (2, 1))))  # b's rows overlap
    check(lambda a, b: matmul(a, b, precision="ieee"), torch.matmul, [leaf(5, 1), leaf(3, 7)],
          lambda a, b: (a.expand(5, 7), b.t()))
    check(attention, sdpa_gqa, [leaf(1, 2, 6, 16), leaf(16, 1, 1, 9), leaf(1, 1, 9, 32)],
          lambda q, k, v: (q.expand(3, 2, 6, 16), k.permute(1, 2, 3, 0).expand(3, 1, 9, 16),  # head dim not last
                           v[..., ::2].expand(3, 1, 9, 16)))


# ----- lesson 6's model, its data and its command lines: what has no answer is refused by name

from conftest import parse_command_line  # noqa: E402
from lesson06_gpt import ddp  # noqa: E402
from lesson06_gpt.data import MIN_BYTES, batch, load_bytes  # noqa: E402
from lesson06_gpt.model import GPT, TOY, Config  # noqa: E402


@pytest.mark.parametrize("fields, error, message", [
    ({"heads": 0}, ValueError, "heads must be a whole number >= 1, got 0"),          # once a ZeroDivisionError
    ({"kv_heads": 0}, ValueError, "kv_heads must be a whole number >= 1, got 0"),
    ({"d_model": -64}, ValueError, "d_model must be a whole number >= 1, got -64"),
    ({"layers": 0}, ValueError, "layers must be a whole number >= 1, got 0"),
    ({"seq": 0}, ValueError, "seq must be a whole number >= 1, got 0"),
    ({"vocab": 0}, ValueError, "vocab must be a whole number >= 1, got 0"),
    ({"mlp": 2.5}, TypeError, "mlp must be a whole number >= 1, got 2.5"),
    ({"heads": 3}, ValueError, r"heads \(3\) must divide d_model \(64\)"),
    ({"kv_heads": 3}, ValueError, r"kv_heads \(3\) must divide heads \(4\)"),
])
def test_a_config_without_a_model_is_refused_by_name(fields, error, message):
    with pytest.raises(error, match=message):
        Config(**fields)


@pytest.mark.parametrize("ops", ["course", "torch"])
def test_the_model_refuses_inputs_without_an_answer_by_name(ops):
    ids = lambda *shape, high=TOY.vocab: torch.randint(0, high, shape, device=DEVICE)  # noqa: E731
    for kwargs, error, message in [({"dtype": "int8"}, ValueError, "dtype must be one of .*got 'int8'"),
                                   ({"dtype": "bf16"}, ValueError, "dtype must be one of .*got 'bf16'")]:
        with pytest.raises(error, match=message):  # (once getattr(torch, "bf16"): an AttributeError)
            GPT(TOY, ops, **kwargs)
    if ops == "course":
        with pytest.raises(ValueError, match="the course's kernels take float32, bfloat16 or float16"):
            GPT(TOY, ops, dtype="float64")
    model = GPT(TOY, ops, dtype=torch.float32)  # (a torch.dtype is taken as its name)
    x = ids(2, 8)
    cases = [((ids(1, TOY.seq + 1), ids(1, TOY.seq + 1)), ValueError,
              f"idx holds {TOY.seq + 1} tokens a row, more than the position table's config.seq = {TOY.seq}"),
             ((x, x[:, :7]), ValueError, r"targets must have idx's shape: idx \(2, 8\), targets \(2, 7\)"),
             ((x[0], x[0]), ValueError, r"idx must be 2-D \(batch, time\), got shape \(8,\)"),
             ((x.float(), x), TypeError, "idx must be an int64 or int32 tensor of token ids, got torch.float32")]
    if not x.is_cuda:  # (the ids' range is read back on the CPU only: model.py's check_tokens says why)
        cases += [((x, x.index_fill(1, torch.tensor([3], device=DEVICE), TOY.vocab)), ValueError,  # (edges: vocab, -1)
                   r"token ids must be in \[0, 256\) \(config.vocab\): idx and targets hold ids from \d+ to 256$"),
                  ((x.index_fill(1, torch.tensor([5], device=DEVICE), -1), x), ValueError, r"\[0, 256\) .* from -1 to \d+$")]
    for (idx, targets), error, message in cases:
        with pytest.raises(error, match=message):
            model(idx, targets)
    with torch.no_grad():  # no tokens: the mean of no losses, NaN, as F.cross_entropy's
        assert model(ids(0, 8), ids(0, 8)).isnan() and model(x, x).isfinite()


def test_data_too_short_and_bad_command_lines_are_named(tmp_path):
    short = tmp_path / "short.txt"
    short.write_bytes(b"x" * (MIN_BYTES - 1))  # its last 10%: 65 bytes, one short of a window and a start
    with pytest.raises(SystemExit, match=f"holds {MIN_BYTES - 1} bytes: too few for a validation split"):
        load_bytes(str(short))
    long_enough = tmp_path / "long.txt"
    long_enough.write_bytes(b"x" * MIN_BYTES)
    from lesson06_gpt.data import split
    _, val = split(load_bytes(str(long_enough)))
    assert batch(val, 2, TOY.seq, torch.Generator().manual_seed(0))[0].shape == (2, TOY.seq)  # the last 10%: a window
    with pytest.raises(ValueError, match="65 tokens hold no window of seq \\+ 1 = 65 tokens"):
        batch(val[:-1], 1, TOY.seq, torch.Generator())  # (once torch.randint's "from" past "to")
    with pytest.raises(ValueError, match="batch_size must be a whole number >= 1, got 0"):
        batch(val, 0, TOY.seq, torch.Generator())
    for argv, message in [(["--data", str(short)], "argument --data: .* holds 659 bytes"),
                          (["--data", str(tmp_path / "nothing.txt")], "argument --data: .*nothing.txt: no such file"),
                          (["--steps", "-3"], "argument --steps: -3 is not a size"),
                          (["--dtype", "int8"], "argument --dtype: invalid choice")]:
        code, _, err = parse_command_line("lesson06_gpt", "--sections", "train", *argv)
        assert code == 2 and re.search(message, err), (argv, err)
    for argv in (["--steps", "0"], ["--batch", "-1"]):
        with pytest.raises(SystemExit) as exit_:
            ddp.main(argv)  # (parsed before it asks for torchrun)
        assert exit_.value.code == 2
