"""The shared helpers: input checks, a chapter's run, PTX parsing, the profiler table, trace
formatting, the results pages, the launch helpers."""
import argparse
import os
import sys
import time
from types import SimpleNamespace

import pytest
import torch
import triton
import triton.language as tl

from conftest import DEVICE, INTERPRET, ROOT
from common import bench, chapter as chapter_module, profile, ptx, results
from common.chapter import Chapter, positive_int, shape_arg
from common.checks import check_tensors, dtype_name
from common.table import Table, print_table
from common.trace import fmt, value_of


def test_check_tensors_names_the_problem():
    x = torch.ones(2, 3, device=DEVICE)
    check_tensors({"x": x, "y": x.t().t()}, (torch.float32,), ndim=2, same_shape=True)
    cases = [
        (({"x": x}, (torch.float32,), 3), ValueError, r"x must be 3-D, got shape \(2, 3\)"),
        (({"x": x}, (torch.float16, torch.bfloat16)), TypeError, "x has dtype float32; supported: float16, bfloat16"),
        (({"x": [1.0]}, (torch.float32,)), TypeError, "x must be a torch.Tensor, got list"),
        (({"x": torch.ones(2, device="meta")}, (torch.float32,)), ValueError, "is on meta: a meta tensor has"),
        (({"x": x.to_sparse()}, (torch.float32,)), ValueError, "sparse_coo tensor; .* use x.to_dense()"),
        (({"a": x, "b": x.half()}, (torch.float32, torch.float16)), TypeError,
         r"a, b have different dtypes \(float32, float16\): cast one"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            check_tensors(*args)
    with pytest.raises(ValueError, match=r"x, y have different shapes: \(2, 3\), \(3, 2\)"):
        check_tensors({"x": x, "y": x.t()}, (torch.float32,), same_shape=True)
    assert dtype_name(torch.bfloat16) == "bfloat16"


@pytest.mark.skipif(not INTERPRET, reason="on a GPU machine, CPU tensors are the wrong device")
def test_check_tensors_hands_one_tensor_given_twice_as_two():
    # add(x, x): an autograd function given one tensor as two inputs is refused by torch.compile (or,
    # torch 2.11, compiled into wrong gradients): the repeat comes back a view, the same memory
    x, y = torch.randn(3, 4, device=DEVICE), torch.randn(3, 4, device=DEVICE)
    a, b, c = check_tensors({"x": x, "y": y, "z": x}, (torch.float32,))
    assert a is x and b is y and c is not x and c.data_ptr() == x.data_ptr() and torch.equal(c, x)
    leaf = x.clone().requires_grad_()
    p, q = check_tensors({"x": leaf, "y": leaf}, (torch.float32,))
    (p * 2 + q).sum().backward()
    assert torch.equal(leaf.grad, torch.full_like(x, 3.0))  # both uses' gradients reach the one leaf


def test_check_tensors_never_suggests_moving_a_meta_tensor():
    with pytest.raises(ValueError) as error:
        check_tensors({"x": torch.ones(2, device="meta")}, (torch.float32,))
    assert ".to(" not in str(error.value)


SECTIONS = {"trace": "2. The trace", "check": "4. Correctness", "bench": "10. Timing"}
STAMP = {"GPU": "NVIDIA H200", "driver": "580.159.04", "CUDA": "13.0", "torch": "2.11.0", "triton": "3.6.0",
         "date": "2026-12-01", "copy bandwidth (measured)": "4228 GB/s"}


def test_command_line_types():
    assert positive_int("12") == 12 and shape_arg("4096x16384") == (4096, 16384)
    for bad in ("0", "-3", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="not a shape"):
        shape_arg("4096")


def test_a_chapter_starts_no_process_but_the_traces_one_ahead_of_its_first_trace(monkeypatch):
    # no spare processes: starting a chapter, as a script or a notebook, starts none, but on a GPU,
    # where a "trace" section will run in the interpreter's process, that one, importing the lesson
    from common import chapter as chapter_module

    started = []
    monkeypatch.setattr(chapter_module.child, "_kept", {})
    monkeypatch.setattr(chapter_module.child, "Child", lambda *a, **k: started.append(a) or SimpleNamespace(
        ask=lambda function, kwargs: started.append((function, kwargs)), process=SimpleNamespace(poll=lambda: None)))
    monkeypatch.setattr(chapter_module, "banner", lambda: "Mode: a GPU")
    script = os.path.join(ROOT, "lesson01_vector_add", "main.py")
    for interpret in (False, True):
        monkeypatch.setattr(chapter_module, "INTERPRET", interpret)
        for argv in ([script], [script, "--skip", "trace"], ["ipykernel_launcher.py", "-f", "k.json"]):
            monkeypatch.setattr(sys, "argv", argv)
            Chapter("lesson01_vector_add", "Doc.", {**SECTIONS, "trace": "2. Trace"}, running=True).start()
            Chapter("lesson01_vector_add", "Doc.", SECTIONS, running=True).start()  # (no trace section)
    mode = chapter_module.child._mode(True)  # (None where the interpreter is this process's mode: a CPU)
    assert started == [(mode, ()), ("importlib:import_module", {"name": "lesson01_vector_add.main"})]


def test_a_chapter_reads_its_command_line_only_when_it_is_the_script(monkeypatch, capsys):
    script = os.path.join(ROOT, "lesson01_vector_add", "main.py")
    monkeypatch.setattr(sys, "argv", [script, "--skip", "trace", "bench"])
    args = Chapter("lesson01_vector_add", "Lesson 9: a test.\nMore.", SECTIONS, running=True).start()
    assert args.sections == ["check"] and not args.full
    assert capsys.readouterr().out.startswith("Mode: ")  # the banner, when running
    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py", "-f", "kernel.json"])  # a notebook's kernel
    assert Chapter("lesson01_vector_add", "Doc.", SECTIONS, running=True).start().sections == list(SECTIONS)
    monkeypatch.setattr(sys, "argv", [script, "--sections", "plot"])
    with pytest.raises(SystemExit):
        Chapter("lesson01_vector_add", "Doc.", SECTIONS, running=True).start()
    capsys.readouterr()
    imported = Chapter("lesson01_vector_add", "Doc.", SECTIONS, running=False)  # an import: defaults, silence
    imported.start()
    ran = []
    imported.run("check", lambda: ran.append(1))
    assert ran == [] and capsys.readouterr().out == ""
    with pytest.raises(KeyError):
        imported.run("plot", lambda: None)  # not a section of the chapter


def page(tmp_path, lesson="lesson09_test") -> str:
    """A results page for the fake lesson under tmp_path, with one recorded GPU section."""
    folder = tmp_path / lesson
    folder.mkdir()
    timing = Table(["N", "GB/s"], [[256, 1500.25], [1024, 3000.5]], title="Timing, float32", note="A note.",
                   plot=dict(x="N", y="GB/s", series=[], ceiling=4228.0, ceiling_label="copy"))
    return results.write_page(str(folder), "Lesson 9: results", STAMP,
                              [("check", "4. Correctness", [Table(["ok"], [[True]], title="Check")]),
                               ("bench", "10. Timing", [timing, Table(["a"], [[1]], title="Another")])])


def test_a_chapter_runs_its_sections_and_shows_the_record_where_a_gpu_is_needed(tmp_path, monkeypatch, capsys):
    page(tmp_path)
    monkeypatch.setattr(chapter_module, "ROOT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py"])
    monkeypatch.setattr(chapter_module, "INTERPRET", True)
    chapter = Chapter("lesson09_test", "Lesson 9: a test.", {**SECTIONS, "host": "12. Host"}, running=True)
    chapter.start()
    capsys.readouterr()
    chapter.run("check", lambda: [print_table([[1]], ["x"], title="Kept"), print_table([[2]], ["y"])])
    assert [t.title for t in chapter.tables["check"]] == ["Kept"]  # titled tables only
    chapter.run("bench", lambda: 1 / 0, gpu=True)  # not run: its record is printed instead
    chapter.run("bench", lambda: 1 / 0, gpu=True)
    chapter.run("host", lambda: 1 / 0, gpu=True)
    out = capsys.readouterr().out
    assert out.count("=== 10. Timing ===") == 2 and out.count("| NVIDIA H200 | 580.159.04 |") == 1  # stamp once
    assert out.count("| 1024 | 3000.5 |") == 2 and "### Another" in out and "![" not in out
    assert "has no record of it yet" in out
    assert chapter.results() == [("check", "4. Correctness", chapter.tables["check"])]


def test_a_gpu_section_prints_the_recorded_tables_that_stand_in_for_it(tmp_path, monkeypatch, capsys):
    # stand_in: words of the titles of the tables printed in a GPU section's place; the others are named
    page(tmp_path)
    monkeypatch.setattr(chapter_module, "ROOT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py"])
    monkeypatch.setattr(chapter_module, "INTERPRET", True)
    chapter = Chapter("lesson09_test", "Lesson 9: a test.", SECTIONS, running=True)
    chapter.start()
    capsys.readouterr()
    chapter.run("bench", lambda: 1 / 0, gpu=True, stand_in=("Another",))
    out = capsys.readouterr().out
    assert "### Another" in out and "| 1024 | 3000.5 |" not in out and "A note." not in out
    assert out.rstrip().endswith("Also recorded there: Timing, float32.")
    chapter.run("bench", lambda: 1 / 0, gpu=True, stand_in=())  # none: the titles alone
    out = capsys.readouterr().out
    assert "###" not in out and "RESULTS.md records what it printed on a GPU: Timing, float32; Another." in out
    chapter.run("bench", lambda: 1 / 0, gpu=True, stand_in=("float32",))
    out = capsys.readouterr().out
    assert "| 1024 | 3000.5 |" in out and "A note." in out and "### Another" not in out


def test_a_sweep_runs_with_full_only_and_its_record_stands_in_otherwise(tmp_path, monkeypatch, capsys):
    # full=True: on a GPU a default run prints the page's record of the section; --full runs it
    page(tmp_path)
    monkeypatch.setattr(chapter_module, "ROOT", str(tmp_path))
    monkeypatch.setattr(chapter_module, "INTERPRET", False)
    monkeypatch.setattr(chapter_module.child, "prepare", lambda *args, **kwargs: None)  # (no traces' process)
    for argv, ran in ((["main.py"], False), (["main.py", "--full"], True)):
        monkeypatch.setattr(sys, "argv", [str(tmp_path / "lesson09_test" / "main.py"), *argv[1:]])
        chapter = Chapter("lesson09_test", "Lesson 9: a test.", SECTIONS, running=True)
        chapter.start()
        capsys.readouterr()
        chapter.run("bench", lambda: print_table([[1]], ["x"], title="Swept"), gpu=True, full=True)
        out = capsys.readouterr().out
        assert ("| 1024 | 3000.5 |" in out and "This section is a sweep that --full runs." in out) != ran
        assert ("Swept" in out) == ran


def test_a_section_runs_in_a_child_process_and_its_tables_come_back(monkeypatch, capsys):
    from common import child

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import sections

    monkeypatch.setenv("PYTHONPATH", os.path.join(ROOT, "tests"))
    # a process of its own: one kept by an earlier test in this worker was started without tests/ on
    # its path and cannot import `sections`
    monkeypatch.setattr(child, "_kept", {})
    chapter = Chapter("lesson01_vector_add", "Doc.", {"t": "1. T"}, running=True)
    try:
        tables = chapter.in_child(sections.a_table, trace=True)
    finally:
        child._close_kept()
    assert "printed in the child" in capsys.readouterr().out
    assert [(t.title, t.rows, t.note) for t in tables] == [("From the child", [["a", 1.5]], "A note.")]
    with pytest.raises(TypeError, match="not a lambda"):
        chapter.in_child(lambda: None, trace=False)


def test_kept_processes_serve_their_mode_and_fresh_ones_serve_once(monkeypatch):
    # keep=True: one process per mode, started at the first request and serving the next ones (a
    # run's traces, the exercises a test run checks); without: a new process each time (host timings)
    from common import child

    monkeypatch.setenv("PYTHONPATH", os.path.join(ROOT, "tests"))
    monkeypatch.setattr(child, "_kept", {})
    kept = {int(child.run("sections:whose_process", interpret=True, keep=True)[0].split()[0]) for _ in range(3)}
    # this process's own mode, asked for by name or as None, is one mode: one process serves it
    own = {int(child.run("sections:whose_process", interpret=mode, keep=True)[0].split()[0])
           for mode in (None, INTERPRET)}
    fresh = {int(child.run("sections:whose_process", interpret=True)[0].split()[0]) for _ in range(2)}
    assert len(kept) == 1 and len(own) == 1 and len(fresh) == 2 and not (kept | own) & fresh
    assert (kept == own) == INTERPRET  # the interpreter is this process's mode only on a CPU
    processes = list(child._kept.values())
    child._close_kept()
    assert child._kept == {} and all(p.process.returncode == 0 for p in processes)


def test_a_prepared_process_imports_its_module_ahead_and_serves_the_kept_runs(monkeypatch):
    # child.prepare: the chapter starts the traces' process early (common/chapter.py), and it imports
    # the lesson while the run goes on; the first trace then finds the module imported
    from common import child

    monkeypatch.setenv("PYTHONPATH", os.path.join(ROOT, "tests"))
    monkeypatch.setattr(child, "_kept", {})
    prepared = child.prepare(interpret=True, module="sections")
    assert child.prepare(interpret=True, module="sections") is prepared  # started once
    time.sleep(2)
    pid, since_import = child.run("sections:whose_process", interpret=True, keep=True)[0].split()
    assert int(pid) == prepared.process.pid and float(since_import) > 1.0
    assert child.run("sections:whose_process", interpret=True, keep=True)[0].split()[0] == pid
    child._close_kept()
    child.prepare(interpret=True, module="no_such_module")  # a head start that fails costs the run nothing
    assert child.run("sections:whose_process", interpret=True, keep=True)[0].split()[0].isdigit()
    child._close_kept()


def test_a_childs_error_comes_back_with_its_traceback_and_a_kept_process_goes_on(monkeypatch):
    from common import child

    monkeypatch.setenv("PYTHONPATH", os.path.join(ROOT, "tests"))
    monkeypatch.setattr(child, "_kept", {})
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        child.run("sections:fails", interpret=True, keep=True)
    assert child.run("sections:a_table", interpret=True, keep=True)[1][0].title == "From the child"
    with pytest.raises(RuntimeError, match="No module named"):
        child.run("no_such_module:f")
    child._close_kept()


def test_compiling_for_a_gpu_without_one_takes_a_kept_compiled_mode_process(monkeypatch):
    # under the interpreter a compilation goes to a compiled-mode child, kept for the next; on a GPU
    # this process compiles, the kernel handed over as itself
    from common import child, ptx
    from lesson01_vector_add.elementwise import add_kernel

    monkeypatch.setattr(child, "_kept", {})
    job = dict(module="lesson01_vector_add.elementwise", kernel=add_kernel, signature={
        "x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "N": "i32"}, constexprs={"BLOCK_SIZE": 64},
        asm=("ptx",))
    for _ in range(2):
        (result,) = ptx.compile_kernels([job])
        assert "ld.global" in result["ptx"]
    assert len(child._kept) == (1 if INTERPRET else 0)
    child._close_kept()


def test_ptx_parsing():
    text = """
        ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
        @%p1 ld.global.L1::evict_last.b32 { %r5 }, [ %rd2 + 0 ];
        st.global.v2.b16 [ %rd3 + 0 ], { %rs1, %rs2 };
        ld.global.v4.b32 { %r6, %r7, %r8, %r9 }, [ %rd4 + 0 ];
    """
    ops = ptx.memory_ops(text)
    assert ops == {"ld.global.v4.b32": 2, "ld.global.b32": 1, "st.global.v2.b16": 1}
    assert [ptx.access_bits(op) for op in ("ld.global.v4.b32", "ld.global.b32", "st.global.v2.b16")] == [128, 32, 32]


def test_sass_loops():
    # cuobjdump's layout: the innermost loops that hold the instruction asked for, in address order;
    # a loop closes with a conditional branch back; an mbarrier wait's retry, out of line after the
    # function's end, branches back unconditionally and is no loop
    code = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x000 */
        /*0010*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], RZ ;   /* 0x000 */
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5], R2 ;
        /*0030*/              @!P0 BRA 0x0100 ;
        /*0040*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], R24 ;
        /*0050*/                   LDL R3, [R1] ;
        /*0060*/               @P1 BRA 0x0020 ;
        /*0070*/                   IADD3 R4, R4, 0x1, RZ ;
        /*0080*/               @P2 BRA 0x0070 ;
        /*0090*/               @P3 BRA 0x0000 ;
        /*00a0*/                   EXIT ;
        /*0100*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5], R2 ;
        /*0110*/              @!P0 BRA 0x0100 ;
        /*0120*/                   BRA 0x0040 ;
    """
    loops = ptx.sass_loops(code, "HGMMA")
    assert loops == [["SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5], R2", "@!P0 BRA 0x0100",
                      "HGMMA.64x64x16.F32 R24, gdesc[UR4], R24", "LDL R3, [R1]", "@P1 BRA 0x0020"]]
    assert ptx.sass_loops(code, "LDS") == []


def test_print_table(capsys):
    table = print_table([("a", 1.234)], ["name", "value"], title="T", note="A note.")
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "T" and "1.2" in out and out.splitlines()[4] == "A note."
    assert table.column("value") == [1.234] and "| a " in table.markdown()
    # a format per column (a ratio of a few percent beside times in 0.1 µs, lesson 4 section 17)
    ratios = print_table([("a", 49.04, 0.944)], ["name", "µs", "x"], floatfmt=(".1f", ".1f", ".2f"))
    assert "| 49.0 |" in ratios.markdown() and "| 0.94 |" in ratios.markdown()


def test_results_page_written_and_read_back_by_section(tmp_path):
    text = page(tmp_path)
    assert (tmp_path / "lesson09_test" / "RESULTS.md").read_text() == text
    lines = text.splitlines()
    assert lines[0] == "# Lesson 9: results"
    assert "| NVIDIA H200 | 580.159.04 | 13.0 | 2.11.0 | 3.6.0 | 2026-12-01 | 4228 GB/s |" in lines
    assert [line for line in lines if line.startswith("## ")] == ["## 4. Correctness", "## 10. Timing"]
    read = results.read_page(str(tmp_path / "lesson09_test" / "RESULTS.md"))
    assert read["stamp"]["GPU"] == "NVIDIA H200" and list(read["sections"]) == ["check", "bench"]
    tables = results.read_tables(read["sections"]["bench"])
    assert [t["title"] for t in tables] == ["Timing, float32", "Another"]
    assert tables[0]["rows"][1] == {"N": "1024", "GB/s": "3000.5"}
    try:
        import matplotlib  # noqa: F401
        assert (tmp_path / "lesson09_test" / "results_bench_1.png").exists()
    except ImportError:  # no plot without matplotlib; the tables are still written
        assert "results_bench_1.png" not in text
    assert results.read_page(str(tmp_path / "none.md")) is None


def test_the_roofline_draws_one_gpus_points_under_that_gpus_ceilings(tmp_path, monkeypatch):
    from common import roofline

    def write(lesson, gpu, kernel):
        (tmp_path / lesson).mkdir()
        (tmp_path / lesson / "RESULTS.md").write_text(
            f"# {lesson}\n\n| GPU | copy bandwidth (measured) | matmul rate (measured) |\n|---|---|---|\n"
            f"| {gpu} | 3000 GB/s | 800 TFLOP/s |\n\n## 9. Roofline\n{results.MARKER.format('roofline')}\n\n"
            f"### {roofline.TITLE}\n\n| kernel | FLOP/byte | TFLOP/s |\n|---|---|---|\n| {kernel} | 0.25 | 0.7 |\n")

    write("lesson01_vector_add", "NVIDIA H200", "h200 add")
    write("lesson02_softmax", "NVIDIA H100 80GB HBM3", "h100 softmax")
    write("lesson03_rowsum", "NVIDIA H100 80GB HBM3", "h100 row_sum")
    drawn = {}
    monkeypatch.setattr(results, "ROOT", str(tmp_path))
    monkeypatch.setattr(roofline, "plot", lambda pts, peak, bandwidth, gpu, path: drawn.update(
        pts=pts, gpu=gpu, peak=peak, bandwidth=bandwidth) or True)
    assert results.draw_roofline(str(tmp_path / "roofline.png"))
    assert drawn["gpu"] == "NVIDIA H100 80GB HBM3" and (drawn["peak"], drawn["bandwidth"]) == (800.0, 3000.0)
    assert [p[1] for p in drawn["pts"]] == ["h100 softmax", "h100 row_sum"]  # the H200's page left out


def test_results_page_updated_section_by_section(tmp_path):
    page(tmp_path)
    folder = str(tmp_path / "lesson09_test")
    results.update_page(folder, {**STAMP, "date": "2026-12-02"},
                        [("check", "4. Correctness", [Table(["ok"], [[False]], title="Check", note="new note")])])
    text = (tmp_path / "lesson09_test" / "RESULTS.md").read_text()
    assert "Refreshed apart from the rest of this page: NVIDIA H200, torch 2.11.0, triton 3.6.0, 2026-12-02" in text
    assert "new note" in text and "| False |" in text and "| True |" not in text
    assert "| 1024 | 3000.5 |" in text  # the other section is as it was
    read = results.read_page(os.path.join(folder, "RESULTS.md"))
    assert list(read["sections"]) == ["check", "bench"]
    with pytest.raises(SystemExit, match="measured with triton 3.6.0, this machine has 3.9.0"):
        results.update_page(folder, {**STAMP, "triton": "3.9.0"}, [])
    # sections the page lacks (a chapter's new ones) go in by their numbers, in the chapter's order
    results.update_page(folder, STAMP, [("later", "12. Later", [Table(["n"], [[12]], title="Later")]),
                                        ("fourth", "5. Fourth", [Table(["n"], [[5]], title="Fourth")])])
    text = (tmp_path / "lesson09_test" / "RESULTS.md").read_text()
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        "## 4. Correctness", "## 5. Fourth", "## 10. Timing", "## 12. Later"]
    read = results.read_page(os.path.join(folder, "RESULTS.md"))
    assert list(read["sections"]) == ["check", "fourth", "bench", "later"]
    assert "| 1 |\n\n## 12. Later" in text.replace("|   1 |", "| 1 |") and "\n\n## 10. Timing" in text
    assert [t["title"] for t in results.read_tables(read["sections"]["fourth"])] == ["Fourth"]
    assert [t["title"] for t in results.read_tables(read["sections"]["bench"])] == ["Timing, float32", "Another"]


@pytest.mark.skipif(not INTERPRET, reason="on a GPU the command would run every benchmark")
def test_results_refuse_the_interpreter(capsys):
    assert results.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_results_usage_errors(capsys):
    assert results.main(["lesson02_softmax", "--sections"]) == 2
    assert results.main(["--sections", "host", "lesson02_softmax"]) == 2
    assert "lessons first" in capsys.readouterr().out


def test_the_gpu_commands_refuse_a_cpu_and_a_name_that_is_no_lesson(monkeypatch):
    # common.results and common.first_run: results.refusal, printed before anything runs
    monkeypatch.setattr(results, "INTERPRET", True)
    assert results.refusal(["lesson02_softmax"], "common.first_run") == \
        "common.first_run needs a CUDA GPU: it measures a GPU."
    monkeypatch.setattr(results, "INTERPRET", False)
    assert results.refusal(["lesson02_softmax", "lesson9"], "common.results").startswith(
        "unknown lesson lesson9: the lessons are lesson01_vector_add, ")
    assert results.refusal(["lesson02_softmax"], "common.results") is None and results.refusal([], "x") is None


def test_each_lessons_page_runs_a_command_line_its_chapter_accepts():
    # a page skips the trace where the lesson has one; lesson 7 has none (--skip trace would be refused)
    for name in results.LESSONS:
        argv = results.lesson_argv(name)
        with open(argv[0]) as f:
            source = f.read()
        skipped = argv[argv.index("--skip") + 1:] if "--skip" in argv else []
        assert all(f'chapter.run("{section}"' in source for section in skipped), (name, argv)
    assert "--skip" not in results.lesson_argv("lesson07_hopper")
    assert results.lesson_argv("lesson02_softmax")[1:] == ["--full", "--skip", "trace"]
    assert results.lesson_argv("lesson02_softmax", ["bench"])[1:] == ["--full", "--sections", "bench"]


def test_trace_formatting():
    assert fmt(torch.tensor([1.0, 2.5])) == "[1. , 2.5]"
    assert fmt(0.123456789) == "0.1235"
    assert value_of(torch.tensor(3)) == 3


@pytest.mark.skipif(INTERPRET, reason="needs a GPU: the interpreter launches no CUDA kernels")
def test_gpu_kernel_names_in_profile():
    from lesson01_vector_add.elementwise import gelu
    x = torch.randn(1 << 16, device=DEVICE)
    rows = profile.kernels_launched(lambda: gelu(x))
    assert [name for name, _, _ in rows] == ["gelu_kernel"]


def test_side_by_side_takes_turns_and_keeps_the_median(monkeypatch):
    # The GPU path, with a fake clock that drifts: every case must see each phase of the drift.
    calls = []
    drift = iter([1.0, 2.0, 1.1, 2.1, 5.0, 9.0])  # round 3 runs slow for both cases

    def fake_kernel_time_ms(fn, repeat):
        calls.append(fn())
        return next(drift)

    monkeypatch.setattr(bench, "kernel_time_ms", fake_kernel_time_ms)
    times = bench.side_by_side({"a": lambda: "a", "b": lambda: "b"}, rounds=3)
    assert calls == ["a", "b"] * 3
    assert times == {"a": 1.1, "b": 2.1}


def test_roofline_arithmetic():
    from common.roofline import attainable, intensity

    assert intensity(1, 12) == 1 / 12                       # vector add, float32: 1 FLOP per 12 bytes
    assert attainable(1 / 12, 989, 3350) == pytest.approx(3350 / 12 / 1e3)  # memory-bound: beta x AI
    assert attainable(1000, 989, 3350) == 989               # compute-bound: pi
    ridge = 989 / 3350 * 1e3                                # FLOP/byte where the two meet
    assert attainable(ridge, 989, 3350) == pytest.approx(989)


def test_roofline_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from common.roofline import plot

    pts = [("01", "add", 1 / 12, 0.3), ("04", "matmul", 600.0, 700.0)]
    assert plot(pts, 790.0, 4200.0, "NVIDIA H200", str(tmp_path / "r.png")) and (tmp_path / "r.png").stat().st_size > 0


@pytest.mark.skipif(INTERPRET, reason="needs a GPU: the interpreter launches no CUDA kernels")
def test_profiler_counts_the_kernels_of_each_implementation():
    x = torch.randn(1024, device=DEVICE)
    one = profile.kernels_launched(lambda: x + x)
    assert sum(calls for _, calls, _ in one) == 1
    assert "add" in one[0][0].lower()
    many = profile.kernels_launched(lambda: (x * 2 + 1).tanh() * x)
    assert sum(calls for _, calls, _ in many) == 4
    with_range = profile.kernels_launched(lambda: torch.profiler.record_function("a range")(lambda: x + x)())
    assert [name for name, _, _ in with_range] == [one[0][0]]  # a range around a kernel is not a kernel


def test_launch_helpers_match_triton():
    import triton

    from common.launch import cdiv, next_power_of_2

    for n in (1, 2, 3, 1000, 1024, 1025, 2**31 + 5):
        assert next_power_of_2(n) == triton.next_power_of_2(n)
        for b in (1, 3, 16, 1024):
            assert cdiv(n, b) == triton.cdiv(n, b)


def test_timing_cells_fit_the_headers(monkeypatch):
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: 4000.0)
    cells = bench.timing_cells(0.002, nbytes=4e6)
    assert len(cells) == len(bench.TIMING_HEADERS) and cells == pytest.approx([2.0, 2000.0, 50.0])


def test_plot_draws_several_columns(tmp_path):
    pytest.importorskip("matplotlib")
    from common.results import plot

    table = Table(["N", "host µs", "kernel µs"], [[1024, 10.0, 1.0], [4096, 10.0, 3.0]], title="t")
    assert plot(table, str(tmp_path / "p.png"), x="N", y=["host µs", "kernel µs"], series=[], ceiling=None, logy=True)
    assert (tmp_path / "p.png").stat().st_size > 0


@triton.jit
def _plus_one(x):
    return x + 1


@triton.jit
def _helpers_kernel(x_ptr, out_ptr, CALLS: tl.constexpr):
    offsets = tl.arange(0, 16)
    x = tl.load(x_ptr + offsets)
    for _ in tl.static_range(CALLS):
        x = _plus_one(x)
    tl.store(out_ptr + offsets, x + tl.zeros([16], dtype=tl.float32))  # tl.zeros: Triton's helper, on tl.core


@pytest.mark.skipif(not INTERPRET, reason="common.interpreter patches Triton's interpreter only")
def test_interpreter_patches_triton_language_once_per_launch(monkeypatch):
    # common.interpreter: a launch walks triton.language's modules once, however often its kernel
    # calls a @triton.jit helper, still patches a module a helper names first (tl.zeros, tl.core),
    # and leaves triton.language as it found it
    from triton.runtime import interpreter

    walks = []
    getmembers = interpreter.inspect.getmembers
    monkeypatch.setattr(interpreter.inspect, "getmembers", lambda *a, **k: walks.append(1) or getmembers(*a, **k))
    load = tl.load
    x = torch.arange(16, dtype=torch.float32)
    counts = []
    for calls in (1, 1, 6):  # (the first launch rewrites tl.zeros, which then names more modules)
        out = torch.empty_like(x)
        walks.clear()
        _helpers_kernel[(1,)](x, out, CALLS=calls)
        assert torch.equal(out, x + calls)
        counts.append(len(walks))
    assert counts[1] == counts[2] > 0, counts  # six helper calls walk no more than one
    assert tl.load is load  # restored


def test_the_gradient_yardstick_is_twice_torchs_error_plus_a_floor_of_1e_5():
    # grad_ok at its edges: the floor lets a float32 gradient whose yardstick rounds to 0 pass by 1e-5, not more
    from common.checks import grad_ok

    assert grad_ok(0.9e-5, 0.0) and not grad_ok(1.1e-5, 0.0)
    assert grad_ok(2e-3 + 0.9e-5, 1e-3) and not grad_ok(2e-3 + 1.1e-5, 1e-3)


def test_whole_numbers_at_their_bounds():
    import numpy as np

    from common.checks import whole

    assert whole("n", 1) == 1 and whole("n", 3, least=3) == 3 and whole("n", np.int64(5)) == 5
    assert whole("b", 64, power_of_two_to=64) == 64 and whole("b", 1, power_of_two_to=64) == 1
    assert whole("b", torch.tensor(16), power_of_two_to=64) == 16
    for value, kwargs in ((0, {}), (2, {"least": 3}), (np.int64(2), {"least": 3}), (128, {"power_of_two_to": 64}),
                          (np.int64(128), {"power_of_two_to": 64}), (48, {"power_of_two_to": 64}),
                          (0, {"least": 0, "power_of_two_to": 64})):
        with pytest.raises(ValueError, match="must be"):
            whole("n", value, **kwargs)
    for value in (True, 2.0, "3", None):
        with pytest.raises(TypeError, match="n must be"):
            whole("n", value)


@triton.jit
def _double_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < N), mask=offsets < N)


def test_a_recorded_pick_runs_without_timing_and_a_stale_one_is_left_out():
    # common/tuned.py: a key with a pick recorded for it launches that configuration, untimed; a pick
    # whose configuration the list no longer holds is dropped (that key is timed as before)
    from common import tuned
    configs = [triton.Config({"BLOCK": 16}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)]
    autotuner = triton.autotune(configs, key=["N"])(_double_kernel)
    tuned.seed(autotuner, [[[40, "torch.float32", "torch.float32"], {"BLOCK": 64, "num_warps": 2, "num_stages": 3}],
                           [[8, "torch.float32", "torch.float32"], {"BLOCK": 32, "num_warps": 2, "num_stages": 3}]])
    assert list(autotuner.cache) == [(40, "torch.float32", "torch.float32")]
    x = torch.arange(40.0, device=DEVICE)
    y = torch.empty_like(x)
    autotuner[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](x, y, 40)
    assert autotuner.best_config is configs[1] and torch.equal(y, 2 * x)


def test_picks_are_written_per_gpu_and_merged_key_by_key(tmp_path, monkeypatch):
    from common import tuned
    configs = [triton.Config({"BLOCK": 16}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)]
    autotuner = triton.autotune(configs, key=["N"])(_double_kernel)
    monkeypatch.setattr(tuned, "FOLDER", str(tmp_path))
    monkeypatch.setattr(tuned, "AUTOTUNERS", {"double_kernel_tuned": autotuner})
    monkeypatch.setattr(tuned, "gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    autotuner.cache.update({(1024, "torch.float16", "torch.float16"): configs[0], (8, "torch.float32", True): configs[1]})
    tuned.write()
    autotuner.cache.clear()
    autotuner.cache.update({(1024, "torch.float16", "torch.float16"): configs[1], (4096, "torch.float16", False): configs[0]})
    tuned.write()  # a second process of the run: the same key takes its pick, the others stay
    assert os.listdir(tmp_path) == ["nvidia_h100_80gb_hbm3.json"]
    tuned.read.cache_clear()
    rows = tuned.read("NVIDIA H100 80GB HBM3")["double_kernel_tuned"]
    assert sorted(rows) == sorted([[[1024, "torch.float16", "torch.float16"], tuned.described(configs[1])],
                                   [[8, "torch.float32", True], tuned.described(configs[1])],
                                   [[4096, "torch.float16", False], tuned.described(configs[0])]])
    fresh = triton.autotune(configs, key=["N"])(_double_kernel)
    tuned.seed(fresh, rows)  # read back, the keys are the autotuner's own: tuples of ints, bools and strings
    assert fresh.cache == {(1024, "torch.float16", "torch.float16"): configs[1], (8, "torch.float32", True): configs[1],
                           (4096, "torch.float16", False): configs[0]}
    tuned.read.cache_clear()


def test_a_launchers_own_picks_are_written_and_seeded_where_still_valid(tmp_path, monkeypatch):
    # common/tuned.picks: a launcher that chooses itself (lesson 4's split K) keeps its picks as the
    # autotuners do: written at exit with theirs, and read back, keys as tuples, where valid() holds
    from common import tuned
    monkeypatch.setattr(tuned, "FOLDER", str(tmp_path))
    monkeypatch.setattr(tuned, "AUTOTUNERS", {})
    monkeypatch.setattr(tuned, "PICKED", {})
    monkeypatch.setattr(tuned, "gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    table = tuned.picks("split_launcher", lambda key, config: True)
    assert table == {}  # (here nothing is read: no GPU, or nothing recorded)
    table.update({(768, 768, 16384, "", "torch.float32"): {"SPLIT_K": 3}, (64, 64, 64, "gelu", ""): {"SPLIT_K": 9}})
    tuned.write()
    tuned.read.cache_clear()
    monkeypatch.setattr(tuned, "INTERPRET", False)  # read back as a process on that GPU reads it
    monkeypatch.setattr(tuned.torch.cuda, "is_available", lambda: True)
    seeded = tuned.picks("split_launcher", lambda key, config: config["SPLIT_K"] < 8)  # the second no longer valid
    assert seeded == {(768, 768, 16384, "", "torch.float32"): {"SPLIT_K": 3}}
    assert tuned.PICKED["split_launcher"] is seeded  # what a later write() writes
    tuned.read.cache_clear()


def test_a_first_run_is_timed_in_empty_caches_and_stopped_past_its_limit(tmp_path, monkeypatch):
    # common/first_run.py: the lesson's script in a fresh process, with Triton's and Inductor's caches
    # empty; what it compiled and timed is counted from Triton's; a run past the limit is stopped
    from common import first_run
    lesson = tmp_path / "lesson09_test"
    lesson.mkdir()
    (lesson / "main.py").write_text(
        "import os, sys\n"
        "cache = os.environ['TRITON_CACHE_DIR']\n"
        "assert not os.listdir(cache) and not os.listdir(os.environ['TORCHINDUCTOR_CACHE_DIR'])\n"
        "os.makedirs(os.path.join(cache, 'a'))\n"
        "for name in ('a/k.cubin', 'a/k.ptx', 'a/k.autotune.json', 'b.cubin'):\n"
        "    open(os.path.join(cache, name), 'w').close()\n"
        "import time\n"
        "print('=== 1. A ===', flush=True); time.sleep(1.5); print('=== 2. B ===', flush=True)\n"
        "if os.environ.get('COURSE_RECORD_PICKS') == '1':\n"
        "    time.sleep(60)\n")
    monkeypatch.setattr(first_run, "ROOT", str(tmp_path))
    seconds, code, compiled, timed, sections = first_run.first_run("lesson09_test")
    assert (code, compiled, timed) == (0, 2, 1) and seconds < 30
    # (as printed: section 1 holds the 1.5 s sleep, timed from when this process read each heading,
    # so a heading read late can take a little off it; section 2, the run's end, nothing but the
    # exit, which a loaded machine can stretch past a second, never past the sleep)
    assert list(sections) == ["start", "1", "2"] and 1.0 < sections["1"] < 10 and sections["2"] < sections["1"]
    assert abs(sum(sections.values()) - seconds) < 1e-6
    monkeypatch.setattr(first_run, "LIMIT", 2)
    start = time.perf_counter()
    assert first_run.first_run("lesson09_test", record=True)[1] == "stopped" and time.perf_counter() - start < 30
    stamp = {"GPU": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "CUDA": "13.0", "torch": "2.11.0",
             "triton": "3.6.0", "date": "2026-12-07"}
    monkeypatch.setattr(first_run, "machine_stamp", lambda ceilings: stamp)

    def write(lesson, seconds):  # FIRST_RUN.md after a run of one lesson: its rows, in the lessons' order
        first_run.write(Table(["lesson", "seconds"], [[lesson, seconds]], "A first run", "A note.", floatfmt=".0f"))
        page = results.read_page(str(tmp_path / "FIRST_RUN.md"))
        assert page["stamp"] == stamp and "### A first run\n\nA note." in (tmp_path / "FIRST_RUN.md").read_text()
        return [(row["lesson"], row["seconds"]) for row in results.read_tables(
            (tmp_path / "FIRST_RUN.md").read_text())[0]["rows"]]

    assert write("lesson05_flash_attention", 101.0) == [("lesson05_flash_attention", "101")]
    assert write("lesson02_softmax", 53.0) == [("lesson02_softmax", "53"), ("lesson05_flash_attention", "101")]
    assert write("lesson05_flash_attention", 88.0) == [("lesson02_softmax", "53"), ("lesson05_flash_attention", "88")]
    stamp["triton"] = "3.7.0"  # another version: the page starts again
    assert write("lesson01_vector_add", 50.0) == [("lesson01_vector_add", "50")]
    if INTERPRET:
        assert first_run.main(["lesson01_vector_add"]) == 2  # (it times a GPU's first run only)
