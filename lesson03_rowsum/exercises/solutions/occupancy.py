"""SPOILER: the answer of exercise 3.4."""
ANSWER = 25.0
