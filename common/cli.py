"""The lessons' command line: which sections to run, the banner, and the trace.

Every lesson takes --sections (and --help); the trace section runs under the interpreter, in a
child process when this one drives a GPU.
"""
import argparse
import os
import subprocess
import sys

from common.device import INTERPRET, banner


def lesson_parser(doc: str, sections: list) -> argparse.ArgumentParser:
    """A parser with --sections; the lesson adds its own options (sizes, dtype ...)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--sections", nargs="+", default=sections, choices=sections,
                   help="what to run (default: all of them, in this order)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # a trace run by a GPU parent
    return p


def start(parser: argparse.ArgumentParser, argv, trace, script: str, title: str) -> argparse.Namespace:
    """Parse the arguments, print the banner, run the trace if it was asked for."""
    args = parser.parse_args(argv)
    if not args.child:
        print(banner())
    if "trace" in args.sections:
        trace_section(trace, script, args.child, title)
    return args


def trace_section(trace, script: str, child: bool, title: str) -> None:
    """Run a lesson's trace under the interpreter, with its heading.

    Traces print from inside the kernel, one program after another, which only the interpreter
    does. On a GPU machine this process has triton in compiled mode already, and the mode cannot
    be switched once triton is imported, so the lesson runs again, in a child process with
    TRITON_INTERPRET=1, with `--sections trace --child` (the child prints no banner or heading).
    """
    if not child:
        print(f"\n=== {title} ===")
    if INTERPRET:
        trace()
        return
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    sys.stdout.flush()
    subprocess.run([sys.executable, script, "--sections", "trace", "--child"], env=env, check=True)
