"""SPOILER: the answer of exercise 1.4."""
ANSWER = "a"
