"""SPOILER: the answer of exercise 2.1: 8 elements per element of x (read 5MN, write 3MN)."""
ANSWER = 8  # elements moved per element of x: read 5MN, write 3MN
