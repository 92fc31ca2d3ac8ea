"""What every lesson's chapter shares: its sections declared once, in reading order, each run once
and under a markdown heading of the same number (common/chapter.py's shape)."""
import importlib
import os
import pathlib
import re

import pytest

from conftest import ROOT
from common.results import LESSONS


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_sections_are_declared_in_reading_order_under_their_headings(lesson):
    sections = importlib.import_module(f"{lesson}.main").SECTIONS
    source = pathlib.Path(os.path.join(ROOT, lesson, "main.py")).read_text()
    runs = re.findall(r'^chapter\.run\("(\w+)"', source, flags=re.M)
    assert runs == list(sections)  # each section run once, in the order declared
    for heading in sections.values():
        number = heading.split(".")[0]
        assert re.search(rf"^# ## {number}[.-]", source, flags=re.M), f"no markdown heading for section {heading!r}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_results_page_files_each_section_under_the_chapters_heading(lesson):
    # a GPU section run on a CPU prints its block by name: each block on the page is a section of
    # the chapter, under the heading the chapter gives it (common.results writes them so)
    sections = importlib.import_module(f"{lesson}.main").SECTIONS
    page = pathlib.Path(os.path.join(ROOT, lesson, "RESULTS.md")).read_text()
    filed = re.findall(r"^## (.*)\n<!-- section: ([\w-]+) -->$", page, flags=re.M)
    assert filed and len(filed) == page.count("<!-- section: ")
    for heading, name in filed:
        assert name in sections, f"{lesson}/RESULTS.md files a section the chapter does not have: {name}"
        assert heading == sections[name], f"{lesson}/RESULTS.md files {name} under {heading!r}"
