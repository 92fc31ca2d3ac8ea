"""SPOILER: the answer of exercise 5.3: 2 + 4 + 6 + 8 key blocks."""
ANSWER = 20
