"""The lessons' command line: which sections to run and at what sizes, the banner, the trace.

Every lesson takes --sections / --skip, --full and --help. Sizes come from one `SIZES` dict per
lesson, {"cpu": ..., "gpu": ..., "full": ...}: small under the interpreter, a quick look on a GPU,
and with --full the sweeps that `python -m common.results` writes to RESULTS.md.
"""
import argparse
import os
import subprocess
import sys

import torch

from common.device import INTERPRET, gpu_name


def banner() -> str:
    """One line: which mode runs, and what it means for the timings that follow."""
    import triton

    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    if INTERPRET:
        why = "TRITON_INTERPRET=1" if torch.cuda.is_available() else "no CUDA GPU"
        return (f"Mode: {why} -> Triton interpreter on CPU tensors ({versions}). Kernels give "
                "exact results; timings measure the interpreter (numpy), not a GPU.")
    return f"Mode: {gpu_name()} -> compiled Triton kernels ({versions}). Timings are real GPU timings."


def positive_int(text: str) -> int:
    """An argparse type: a size must be a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a size: it must be at least 1")
    return value


def shape_arg(text: str) -> tuple[int, int]:
    """An argparse type: 'MxN', two whole numbers >= 1."""
    parts = text.lower().split("x")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape: write rows x columns, e.g. 4096x16384")
    return tuple(positive_int(part) for part in parts)


def lesson_parser(doc: str, sections: list) -> argparse.ArgumentParser:
    """A parser with --sections, --skip and --full; the lesson adds its own options (sizes ...)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--sections", nargs="+", default=sections, choices=sections,
                   help="what to run (default: all of them, in this order)")
    p.add_argument("--skip", nargs="+", default=[], choices=sections, help="sections to leave out")
    p.add_argument("--full", action="store_true",
                   help="the full sweeps of RESULTS.md instead of a quick look (minutes on a GPU)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # a trace run by a GPU parent
    return p


def start_lesson(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """Parse the arguments and print the banner (then the lesson calls run_sections)."""
    args = parser.parse_args(argv)
    args.sections = [s for s in args.sections if s not in args.skip]
    if not args.child:
        print(banner())
    return args


def add_compile_option(parser: argparse.ArgumentParser) -> None:
    """--compile / --no-compile: include torch.compile in the comparisons. On by default on a GPU,
    where it generates a Triton kernel worth comparing; off on the CPU, where it generates C++ and
    compiling it takes longer than the rest of the lesson."""
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=not INTERPRET,
                        help="include torch.compile (default: on a GPU yes, on the CPU no)")


def sizes_help(what: str, table: dict) -> str:
    """--help text for a lesson's sizes option, from its SIZES table."""
    return f"{what} (default {table['cpu']} interpreted, {table['gpu']} on a GPU, {table['full']} with --full)"


def sizes(args: argparse.Namespace, table: dict):
    """The lesson's sizes for this run: table["full"] with --full, else "cpu" or "gpu"."""
    return table["full" if args.full else "cpu" if INTERPRET else "gpu"]


def run_sections(args: argparse.Namespace, sections: dict) -> None:
    """Run the sections asked for, in the lesson's order, each under its heading.
    sections: {name: (heading, function of no arguments)}, the same names as lesson_parser's."""
    for name, (heading, run) in sections.items():
        if name in args.sections:
            if not args.child:
                print(f"\n=== {heading} ===")
            run()


def trace_section(trace, script: str, child: bool) -> None:
    """Run a lesson's trace under the interpreter.

    Traces print from inside the kernel, one program after another, which only the interpreter
    does. On a GPU machine this process has triton in compiled mode already, and the mode cannot
    be switched once triton is imported, so the lesson runs again, in a child process with
    TRITON_INTERPRET=1, with `--sections trace --child` (the child prints no banner or heading).
    """
    if INTERPRET:
        trace()
        return
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    sys.stdout.flush()
    subprocess.run([sys.executable, script, "--sections", "trace", "--child"], env=env, check=True)
