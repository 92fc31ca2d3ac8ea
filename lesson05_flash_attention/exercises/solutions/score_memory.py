"""SPOILER: the answer of exercise 5.5: 2 x 32 x 32768^2 x 2 bytes."""
ANSWER = 137.4
