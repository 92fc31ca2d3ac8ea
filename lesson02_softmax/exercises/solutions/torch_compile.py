"""SPOILER: the answer of exercise 2.5: "b", the Python if on a tensor's value breaks the graph."""
ANSWER = "b"
