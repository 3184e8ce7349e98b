"""cohort's task runtime for Python: drivers and workers.

    import cohort
    cohort.init("127.0.0.1:8476", "127.0.0.1:7001")

    @cohort.remote
    def square(x):
        return x * x

    total = cohort.get(cohort.function("cohort.sum").remote(*[square.remote(i) for i in range(10)]))

Workers: python -m cohort.worker --scheduler ADDR --objstore ADDR

A gang's workload tells its sidecar it makes progress: cohort.progress.report(step).
"""
from cohort import progress
from cohort.api import (ObjectRef, RemoteFunction, TaskError, function, get, init, put,
                        remote, reusable, reusables, shutdown, wait)

__all__ = ["init", "shutdown", "remote", "function", "put", "get", "wait", "reusable",
           "reusables", "ObjectRef", "RemoteFunction", "TaskError", "progress"]
