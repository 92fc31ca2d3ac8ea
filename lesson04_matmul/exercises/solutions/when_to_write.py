"""SPOILER: the answer of exercise 4.4."""
ANSWER = "b"
