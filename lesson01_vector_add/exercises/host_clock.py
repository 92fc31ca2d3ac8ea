"""Exercise 1.4 (predict): what a host clock measures when nobody waits for the GPU.

The question (lesson 1, sections 10 to 12). On an H100 (lesson 1's RESULTS.md), add(x, y) on
2^24 floats takes about 70 µs of kernel time; a host clock around ONE call, with no
torch.cuda.synchronize() before the clock is read again, reads about 85 µs in the lesson's process.
Now x and y hold 2^28 floats: the kernel moves 16 times the bytes and takes about 1040 µs. What
does the same host clock read now, with no synchronize?

    "a": about 85 µs again: the clock stops when the launch returns, whatever the kernel costs
    "b": about 1040 µs: the clock measures the kernel
    "c": about 16 x 85 = 1360 µs: the launch grows with the data

Write your choice below, then run this file. (The 85 µs at 2^24 is the call's own cost, not the
kernel's: the checks, the allocation, Triton's launch and the driver, in a process that has just
run the profiler; section 12 times the same call at about 40 µs in a fresh one. RESULTS.md of
lesson 1, "Timing pitfalls", has the table; sections 11 and 12 the reasons.)

Run it: python lesson01_vector_add/exercises/host_clock.py   (--hint for a hint, --solution for ours)
"""
from common.exercise import Exercise, fingerprint

ANSWER = None  # "a", "b" or "c"


EXERCISE = Exercise(
    lesson="lesson01_vector_add", name="host_clock", kind="predict", parts=("ANSWER",),
    stub=fingerprint({"ANSWER": None}),
    hints=["What does the Python call add(x, y) wait for before it returns?",
           "The driver puts the kernel in a queue; the GPU runs it later. Does queueing take longer for more bytes?",
           "Lesson 1's 'Host cost per call' table: add(x, y) costs the host the same few tens of µs at 4096 floats "
           "as at 2^28."],
)

if __name__ == "__main__":
    raise SystemExit(EXERCISE.main())
