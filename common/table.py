"""A table with a title and a note: what the lessons print, and what RESULTS.md holds.

Each lesson's section returns the tables it printed; the runner (common/chapter.py) keeps them,
and `python -m common.results` writes them to the lesson's RESULTS.md (with a plot where a table
asks for one).
"""
from dataclasses import dataclass

from tabulate import tabulate


@dataclass
class Table:
    headers: list
    rows: list
    title: str = ""
    note: str = ""
    floatfmt: str | tuple = ".1f"  # tabulate's: one format, or one per column
    plot: dict | None = None  # common.results.plot's keyword arguments, for a picture on RESULTS.md

    def markdown(self) -> str:
        return tabulate(self.rows, headers=self.headers, floatfmt=self.floatfmt, tablefmt="github")

    def column(self, name: str) -> list:
        i = self.headers.index(name)
        return [row[i] for row in self.rows]


def print_table(rows: list, headers: list, title: str = "", note: str = "", floatfmt: str | tuple = ".1f",
                plot: dict | None = None) -> Table:
    """Print a table (its title above, its note below) and return it."""
    table = Table(headers, [list(r) for r in rows], title, note, floatfmt, plot)
    print("\n".join(part for part in (title, table.markdown(), note) if part))
    return table
