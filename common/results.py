"""Real GPU results in the repo: run every lesson's sections on a GPU, write lessonNN_*/RESULTS.md.

    python -m common.results                                   # every lesson, on a CUDA GPU
    python -m common.results lesson02_softmax                  # just one
    python -m common.results lesson02_softmax --sections host  # refresh these sections (lessons first)

Each lesson runs in a child process of its own (common/child.py: a crash in one, even a CUDA
error, cannot take the others down); a failure is reported at the end and the other lessons still
get written. The child runs the lesson's own command line with `--full --skip trace` (`--full` alone
where it has no trace), so a results page holds exactly the tables a learner can print with --full,
section by section under the chapter's own headings: a stamp (GPU, driver, CUDA, torch, triton,
date, the two measured ceilings), then each section's tables with their notes, and a plot where a
table asks for one (with matplotlib installed). With --sections, the child runs just those sections
and they replace their namesakes on the page (one the page lacks goes in by its number), each saying
when and on what it was refreshed (the page's stamp must match the machine's GPU, driver, CUDA,
torch and triton). Then roofline.png: every lesson's "Roofline points" under the ceilings.

Without a GPU, a lesson's sections that need one print their part of the page instead
(common/chapter.py, through read_page).
"""
import datetime
import glob
import os
import re
import runpy
import subprocess
import sys
import time

from common import bench, child, roofline
from common.device import INTERPRET, ROOT
from common.table import Table

LESSONS = ["lesson01_vector_add", "lesson02_softmax", "lesson03_rowsum", "lesson04_matmul",
           "lesson05_flash_attention", "lesson06_gpt", "lesson07_hopper"]
MARKER = "<!-- section: {} -->"  # under each section's heading: the name the chapter runs it by


def machine_stamp(ceilings: bool = True) -> dict:
    """What every number on a results page depends on (ceilings: the two measured ceilings too)."""
    import torch
    import triton

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    return {"GPU": torch.cuda.get_device_name(), "driver": driver, "CUDA": torch.version.cuda,
            "torch": torch.__version__, "triton": triton.__version__,
            "date": datetime.date.today().isoformat(), **(bench.ceilings() if ceilings else {})}


def plot(table: Table, path: str, x: str, y: str | list, series: list, ceiling: float | None,
         ceiling_label: str = "", logx: bool = True, logy: bool = False, ylabel: str = "") -> bool:
    """y against x, one line per distinct value of the `series` columns (or, where y names several
    columns, one line per column, the axis named by ylabel), the ceiling dashed. Returns False (and draws nothing) when
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
    ax.set_ylabel(ylabel or (y if isinstance(y, str) else ""))
    ax.set_title(table.title.splitlines()[0][:90], fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def section_block(folder: str, name: str, heading: str, tables: list, refreshed: dict | None = None) -> str:
    """The markdown of one section: its heading, its marker, then each table (title, note, plot)."""
    lines = [f"## {heading}", MARKER.format(name), ""]
    if refreshed:
        lines += [f"Refreshed apart from the rest of this page: {refreshed['GPU']}, torch {refreshed['torch']}, "
                  f"triton {refreshed['triton']}, {refreshed['date']} (common.results --sections).", ""]
    for i, table in enumerate(tables, 1):
        lines += [f"### {table.title}", ""]
        if table.note:
            lines += [table.note, ""]
        if table.plot:
            png = f"results_{name}_{i}.png"
            if plot(table, os.path.join(folder, png), **table.plot):
                lines += [f"![{table.title}]({png})", ""]
        lines += [table.markdown(), ""]
    return "\n".join(lines)


def stamp_table(stamp: dict) -> list:
    """The machine's stamp as a markdown table of one row, its lines."""
    return ["| " + " | ".join(stamp) + " |", "|" + "---|" * len(stamp),
            "| " + " | ".join(str(v) for v in stamp.values()) + " |"]


def refusal(lessons: list, command: str) -> str | None:
    """Why `command` (a module's name) will not run on these lessons here: no GPU, or a name that is no
    lesson; None where it will."""
    names = [name for name in lessons if name not in LESSONS]
    if INTERPRET:
        return f"{command} needs a CUDA GPU: it measures a GPU."
    return f"unknown lesson {', '.join(names)}: the lessons are {', '.join(LESSONS)}" if names else None


def write_page(folder: str, title: str, stamp: dict, sections: list) -> str:
    """Write folder/RESULTS.md (and its plots) from sections = [(name, heading, [tables])]."""
    for old in glob.glob(os.path.join(folder, "results_*.png")):
        os.remove(old)
    lesson = os.path.basename(folder)
    lines = [f"# {title}", "",
             f"Measured by `python -m common.results {lesson}` (see the README) on the machine below. Every",
             "table comes from that run, except in a section that says it was refreshed apart.", "",
             *stamp_table(stamp), ""]
    text = "\n".join(lines) + "\n" + "\n".join(section_block(folder, *section) for section in sections)
    with open(os.path.join(folder, "RESULTS.md"), "w") as f:
        f.write(text)
    return text


def update_page(folder: str, stamp: dict, sections: list) -> None:
    """Replace, on folder/RESULTS.md, each of `sections` = [(name, heading, [tables])] whole."""
    path = os.path.join(folder, "RESULTS.md")
    page = read_page(path)
    if page is None:
        raise SystemExit(f"no page {path} yet: run the whole lesson (without --sections)")
    for key in ("GPU", "driver", "CUDA", "torch", "triton"):
        if page["stamp"].get(key) != str(stamp[key]):
            raise SystemExit(f"{path} was measured with {key} {page['stamp'].get(key)}, this machine has {stamp[key]}: "
                             "run the whole lesson (without --sections)")
    with open(path) as f:
        text = f.read()
    for name, heading, tables in sections:
        block = section_block(folder, name, heading, tables, refreshed=stamp)
        start, end = _section_span(text, name)
        if start < 0:  # a section new to the page: in the chapter's order, by its number
            text = text.rstrip("\n") + "\n\n"  # a blank line after every block, the last one too
            start = end = _new_section_at(text, heading)
            block += "\n"
        text = text[:start] + block + text[end:]
    with open(path, "w") as f:
        f.write(text)


def _new_section_at(text: str, heading: str) -> int:
    """Where a section the page lacks goes: before the first section numbered after it, else at the end."""
    number = int(heading.split(".")[0])
    later = [m.start() for m in re.finditer(r"^## (\d+)\.", text, flags=re.M) if int(m.group(1)) > number]
    return later[0] if later else len(text)


def _section_span(text: str, name: str) -> tuple[int, int]:
    """Where section `name`'s block starts (its heading) and ends (the next section's), or (-1, -1)."""
    marker = text.find("\n" + MARKER.format(name) + "\n")
    if marker < 0:
        return -1, -1
    start = text.rfind("\n## ", 0, marker) + 1
    end = text.find("\n## ", marker + 1)
    return start, (end + 1 if end >= 0 else len(text))


def read_page(path: str) -> dict | None:
    """A results page: {"stamp": {column: value}, "stamp_lines": its three markdown lines,
    "sections": {name: the section's markdown, heading excluded}}; None when there is no page."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    lines = text.splitlines()
    stamp_lines = [line for line in lines if line.startswith("|")][:3]
    sections = {}
    for name in re.findall(MARKER.format(r"([\w-]+)"), text):
        start, end = _section_span(text, name)
        block = text[start:end].splitlines()[2:]  # after its heading and marker
        sections[name] = "\n".join(block).strip()
    return {"stamp": dict(zip(_cells(stamp_lines[0]), _cells(stamp_lines[2]))), "stamp_lines": stamp_lines,
            "sections": sections}


def _cells(line: str) -> list:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def read_tables(block: str) -> list:
    """The tables of a section's markdown: [{"title", "headers", "rows" (dicts of column -> cell text)}]."""
    tables = []
    for part in re.split(r"^### ", block, flags=re.M)[1:]:
        title, *rest = part.splitlines()
        rows = [line for line in rest if line.startswith("|")]
        headers = _cells(rows[0]) if rows else []
        tables.append({"title": title, "headers": headers, "rows": [dict(zip(headers, _cells(r))) for r in rows[2:]]})
    return tables


def lesson_argv(name: str, sections: list | None = None) -> list:
    """The command line run_lesson gives the lesson: --full, and its `sections` or every section
    but the trace (where it has one: lesson 7's CPU sections show what they trace)."""
    main = os.path.join(ROOT, name, "main.py")
    with open(main) as f:
        has_trace = re.search(r'^chapter\.run\("trace"', f.read(), flags=re.M) is not None
    return [main, "--full", *(["--sections", *sections] if sections else ["--skip", "trace"] if has_trace else [])]


def run_lesson(name: str, sections: list | None = None) -> None:
    """In the child process: the lesson's full run (every section but the trace), then its page; or
    just `sections`, which then replace their namesakes on the page."""
    sys.argv = lesson_argv(name, sections)
    chapter = runpy.run_module(f"{name}.main", run_name="__main__")["chapter"]
    done = chapter.results()
    folder = os.path.join(ROOT, name)
    if sections:
        if not any(tables for _, _, tables in done):
            raise SystemExit(f"those sections print no table for {folder}/RESULTS.md: nothing to refresh")
        return update_page(folder, machine_stamp(), done)
    title = chapter.doc.splitlines()[0].split(".")[0] + ": results on a real GPU"
    write_page(folder, title, machine_stamp(), done)


def draw_roofline(path: str = os.path.join(ROOT, "roofline.png")) -> bool:
    """Every lesson's recorded roofline points in one picture, under the ceilings of the GPU that measured
    the last of them: the points of pages from another GPU are left out (one GPU's ceilings, one GPU's
    points). False where no page, no point or no matplotlib is there."""
    pages, stamp = [], {}
    for lesson in LESSONS:
        page = read_page(os.path.join(ROOT, lesson, "RESULTS.md"))
        if page is None:  # a lesson not measured yet draws no points
            continue
        tables = [t for block in page["sections"].values() for t in read_tables(block) if t["title"] == roofline.TITLE]
        points = [(lesson[6:8], row["kernel"], float(row["FLOP/byte"]), float(row["TFLOP/s"]))
                  for t in tables for row in t["rows"]]
        if points:
            pages.append((page["stamp"].get("GPU", ""), points))
            stamp = page["stamp"]
    if not stamp:
        return False
    pts = [p for gpu, points in pages if gpu == stamp.get("GPU", "") for p in points]
    peak = float(next(v for k, v in stamp.items() if k.startswith("matmul rate")).split()[0])
    bandwidth = float(stamp["copy bandwidth (measured)"].split()[0])
    return bool(pts) and roofline.plot(pts, peak, bandwidth, stamp.get("GPU", ""), path)


def main(argv: list) -> int:
    sections = argv[argv.index("--sections") + 1:] if "--sections" in argv else None
    if sections is not None:
        argv = argv[:argv.index("--sections")]
        if not sections or any(name in LESSONS for name in sections):
            print("usage: python -m common.results [lesson ...] --sections section [section ...] (lessons first)")
            return 2
    problem = refusal(argv, "common.results")
    if problem:
        print(problem)
        return 2
    lessons = argv or LESSONS
    failed = []
    for i, name in enumerate(lessons, 1):
        print(f"[{i}/{len(lessons)}] {name} ...", flush=True)
        start = time.time()
        try:  # its output printed as it goes
            child.run("common.results:run_lesson", dict(name=name, sections=sections), capture=False)
            status = "ok"
        except (RuntimeError, SystemExit) as error:
            status = f"FAILED ({str(error).strip().splitlines()[-1]})"
            failed.append(name)
        print(f"[{i}/{len(lessons)}] {name}: {status}, {time.time() - start:.0f} s", flush=True)
    if not sections and draw_roofline():
        print("Roofline of every lesson's kernels: roofline.png")
    if failed:
        print(f"Results NOT written for: {', '.join(failed)} (their output is above).")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
