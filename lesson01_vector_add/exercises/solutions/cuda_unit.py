"""SPOILER: the answer of exercise 1.6."""
ANSWER = (1024, 1048576, 1024, 131072)
