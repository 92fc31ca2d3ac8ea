"""Real GPU results in the repo: run every lesson's benchmarks, write lessonNN_*/RESULTS.md.

    python -m common.results                        # every lesson, on a CUDA GPU
    python -m common.results lesson02_softmax       # just one
    python -m common.results lesson02_softmax --sections host   # refresh these sections' tables (lessons first)

Each lesson runs in a child process of its own (a crash in one, even a CUDA error, cannot take
the others down); a failure is reported at the end and the other lessons still get written.
The child runs the lesson's own command line with `--full --skip trace`, so a results page holds
exactly the tables a learner can print with --full, and turns them into a page: a stamp (GPU,
driver, CUDA, torch, triton, date, the ceilings measured on the way), each titled table with its
note, and a plot of throughput against size, ceiling drawn in, where a table asks for one (with
matplotlib installed). With --sections (after the lesson names), the child runs just those
sections and their tables replace the ones of the same title on the existing page, each note
stamped with when and on what it was refreshed (the page's stamp must match the machine's GPU,
driver, CUDA, torch and triton). Without a GPU, `print_recorded` shows a lesson's page beside
the interpreter's timings.
"""
import datetime
import importlib
import os
import subprocess
import sys
import time

from common import bench
from common.bench import Table
from common.device import INTERPRET, ROOT

LESSONS = ["lesson01_vector_add", "lesson02_softmax", "lesson03_rowsum", "lesson04_matmul",
           "lesson05_flash_attention"]


def machine_stamp(ceilings: dict) -> dict:
    """What every number on a results page depends on."""
    import torch
    import triton

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    return {"GPU": torch.cuda.get_device_name(), "driver": driver, "CUDA": torch.version.cuda,
            "torch": torch.__version__, "triton": triton.__version__,
            "date": datetime.date.today().isoformat(), **ceilings}


def plot(table: Table, path: str, x: str, y: str | list, series: list, ceiling: float | None,
         ceiling_label: str = "", logx: bool = True, logy: bool = False) -> bool:
    """y against x, one line per distinct value of the `series` columns (or, where y names several
    columns, one line per column), the ceiling dashed. Returns False (and draws nothing) when
    matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    xs = table.column(x)
    numeric = all(isinstance(v, (int, float)) for v in xs)
    labels = list(dict.fromkeys(xs))  # categorical x: keep first-seen order
    fig, ax = plt.subplots(figsize=(8, 4.5))
    keys = ([" / ".join(str(v) for v in vals) for vals in zip(*(table.column(c) for c in series))] if series
            else [""] * len(xs))
    for column in [y] if isinstance(y, str) else y:
        for key in dict.fromkeys(keys):
            pts = [(xv, yv) for k, xv, yv in zip(keys, xs, table.column(column)) if k == key]
            px = [p[0] if numeric else labels.index(p[0]) for p in pts]
            name = column if not isinstance(y, str) else ""  # several columns: each its own line
            ax.plot(px, [p[1] for p in pts], marker="o", label=" / ".join(p for p in (key, name) if p) or y)
    if ceiling:
        ax.axhline(ceiling, color="black", linestyle="--", linewidth=1, label=ceiling_label)
    if numeric and logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    if not numeric:
        ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
    ax.set_xlabel(x)
    ax.set_ylabel(y if isinstance(y, str) else "µs")
    ax.set_title(table.title.splitlines()[0][:90], fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_results(folder: str, title: str, stamp: dict, tables: list) -> str:
    """Write folder/RESULTS.md (and results_N.png plots); return the markdown.

    tables: titled Tables; a table's `plot` (None or a dict of `plot`'s keyword arguments) draws it.
    """
    lines = [f"# {title}", "",
             "Measured by `python -m common.results` (see the README). Every number below comes from",
             "this run, on this machine (a table refreshed alone, with --sections, says so in its note):", "",
             "| " + " | ".join(stamp) + " |", "|" + "---|" * len(stamp),
             "| " + " | ".join(str(v) for v in stamp.values()) + " |", ""]
    for i, table in enumerate(tables):
        lines += [f"## {table.title}", ""]
        if table.note:
            lines += [table.note, ""]
        if table.plot:
            name = f"results_{i + 1}.png"
            if plot(table, os.path.join(folder, name), **table.plot):
                lines += [f"![{table.title}]({name})", ""]
        lines += [table.markdown(), ""]
    text = "\n".join(lines)
    with open(os.path.join(folder, "RESULTS.md"), "w") as f:
        f.write(text)
    return text


def run_lesson(name: str, sections: list | None = None) -> None:
    """In the child process: the lesson's full run (every section but the trace), then its page; or
    just `sections`, whose tables then replace their namesakes on the page."""
    module = importlib.import_module(f"{name}.main")
    if sections:
        module.main(["--full", "--sections", *sections])
        return update_results(os.path.join(ROOT, name), machine_stamp({}), bench.TABLES)
    module.main(["--full", "--skip", "trace"])
    bench.copy_bandwidth()  # in the stamp of every page
    title = module.__doc__.splitlines()[0].split(".")[0] + ": results on a real GPU"
    write_results(os.path.join(ROOT, name), title, machine_stamp(bench.CEILINGS), bench.TABLES)


def update_results(folder: str, stamp: dict, tables: list) -> None:
    """Replace, on folder/RESULTS.md, each table of the same title as one of `tables` (tables without
    a plot only: a plot's file is numbered by the full run)."""
    path = os.path.join(folder, "RESULTS.md")
    if not tables:
        raise SystemExit(f"those sections print no table for {path}: nothing to refresh")
    page = read_table(path, "")  # the first table: any will do, for the page's stamp
    if page is None:
        raise SystemExit(f"no page {path} yet: run the whole lesson (without --sections)")
    for key in ("GPU", "driver", "CUDA", "torch", "triton"):
        if page["stamp"].get(key) != str(stamp[key]):
            raise SystemExit(f"{path} was measured with {key} {page['stamp'].get(key)}, this machine has {stamp[key]}: "
                             "run the whole lesson (without --sections)")
    text = open(path).read()
    for table in tables:
        if table.plot:
            raise SystemExit(f"'{table.title}' has a plot: run the whole lesson (without --sections)")
        note = (f"{table.note} Refreshed apart from the rest of this page: {stamp['GPU']}, torch {stamp['torch']}, "
                f"triton {stamp['triton']}, {stamp['date']} (common.results --sections).").strip()
        block = "\n".join([f"## {table.title}", "", note, "", table.markdown(), ""])
        start = text.find(f"\n## {table.title}\n")
        if start < 0:
            raise SystemExit(f"no table '{table.title}' on {path}: run the whole lesson (without --sections)")
        end = text.find("\n## ", start + 1)
        text = text[:start + 1] + block + (text[end:] if end >= 0 else "")
    with open(path, "w") as f:
        f.write(text)


def read_table(path: str, heading: str) -> dict | None:
    """The first table of a results page whose heading starts with `heading`: {"title", "headers",
    "rows" (each a dict of column name to cell text), "lines" (the markdown), "stamp" (the page's
    stamp as a dict)}; None when the page or the table is missing."""
    if not os.path.exists(path):
        return None
    lines = open(path).read().splitlines()

    def cells(line):
        return [cell.strip() for cell in line.strip().strip("|").split("|")]
    stamp_lines = [line for line in lines if line.startswith("|")][:3]  # the stamp: header, rule, values
    start = next((i for i, line in enumerate(lines) if line.startswith(f"## {heading}")), None)
    if start is None:
        return None
    table = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            table.append(line)
    headers = cells(table[0])
    return {"title": lines[start][3:], "headers": headers, "lines": table, "stamp_lines": stamp_lines,
            "stamp": dict(zip(cells(stamp_lines[0]), cells(stamp_lines[2]))),
            "rows": [dict(zip(headers, cells(line))) for line in table[2:]]}


def print_recorded(script: str, heading: str, keep=None) -> None:
    """Print the first table of this lesson's RESULTS.md whose heading starts with `heading`,
    with the page's stamp: real GPU numbers beside the interpreter's. keep(row) -> bool, where
    row maps column names to cell text, picks rows; None keeps them all."""
    path = os.path.join(os.path.dirname(os.path.abspath(script)), "RESULTS.md")
    table = read_table(path, heading)
    if table is None:
        what = f"table '{heading}' in" if os.path.exists(path) else "page"
        print(f"(no {what} {os.path.relpath(path, ROOT)} yet: `python -m common.results` writes it on a GPU)")
        return
    lines = table["lines"][:2] + [line for line, row in zip(table["lines"][2:], table["rows"])
                                  if keep is None or keep(row)]
    print(f"\nOn a real GPU ({os.path.relpath(path, ROOT)}: {table['title']}), measured on")
    print("\n".join(table["stamp_lines"] + [""] + lines))


def main(argv: list) -> int:
    sections = argv[argv.index("--sections") + 1:] if "--sections" in argv else None
    if sections is not None:
        argv = argv[:argv.index("--sections")]
        if not sections or any(name in LESSONS for name in sections):
            print("usage: python -m common.results [lesson ...] --sections section [section ...] (lessons first)")
            return 2
    if len(argv) == 2 and argv[0] == "--one":
        run_lesson(argv[1], sections)
        return 0
    if INTERPRET:
        print("common.results needs a CUDA GPU: the results pages hold real GPU numbers, and the "
              "interpreter's timings would replace them with numpy's.")
        return 2
    lessons = argv or LESSONS
    failed = []
    for i, name in enumerate(lessons, 1):
        print(f"[{i}/{len(lessons)}] {name} ...", flush=True)
        start = time.time()
        done = subprocess.run([sys.executable, "-m", "common.results", "--one", name]
                              + (["--sections", *sections] if sections else []), cwd=ROOT)
        status = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
        print(f"[{i}/{len(lessons)}] {name}: {status}, {time.time() - start:.0f} s", flush=True)
        if done.returncode:
            failed.append(name)
    from common import roofline

    if not sections and roofline.plot():
        print(f"Roofline of every lesson's kernels: {os.path.relpath(os.path.join(ROOT, 'roofline.png'), ROOT)}")
    if failed:
        print(f"Results NOT written for: {', '.join(failed)} (their output is above).")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
