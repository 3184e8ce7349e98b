"""Functions the tests export: importable by the Python workers (tests/python is on their
path), so cloudpickle ships them by reference like a user's own module."""
import os
import time

import cohort


@cohort.remote
def square(x):
    return x * x


@cohort.remote
def pair_sum(a, b):
    return a + b


@cohort.remote
def explode(message):
    raise ValueError(message)


@cohort.remote
def nap(seconds, value):
    time.sleep(seconds)
    return value


@cohort.remote
def when_file_exists(path, value, deadline_s=120.0):
    """Returns value once path exists (the test creates it when it wants the task done);
    fails after deadline_s, only so that it cannot hang."""
    deadline = time.monotonic() + deadline_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {deadline_s} s")
        time.sleep(0.02)
    return value


@cohort.remote
def forward(ref_list):
    # Returns the object its argument refers to: the result becomes an alias of it.
    return ref_list[0]


@cohort.remote(num_returns=2)
def split(x):
    return x, -x


@cohort.remote
def array_sum(a):
    return float(a.sum())


@cohort.remote
def submit_inner(n):
    # A task that submits tasks and waits for them.
    return sum(cohort.get([square.remote(i) for i in range(n)]))


@cohort.remote
def count_calls():
    counter = cohort.reusables.counter
    counter.append(1)
    return len(counter)
