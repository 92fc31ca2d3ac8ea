"""SPOILER: the answer of exercise 3.2."""
ANSWER = 438
