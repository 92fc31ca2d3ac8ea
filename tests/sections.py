"""Sections for tests/test_common.py's runs of common.chapter in a child process."""
from common.table import print_table


def a_table():
    print("printed in the child")
    return [print_table([("a", 1.5)], ["name", "value"], title="From the child", note="A note."), None]



IMPORTED_AT = __import__("time").time()


def whose_process():
    """The child's process id, and how long before this call it imported this module."""
    import os
    import time

    print(os.getpid(), f"{time.time() - IMPORTED_AT:.3f}")
    return []


def fails():
    return 1 / 0
