"""Telling the pod's sidecar that the workload makes progress, for its hang detection.

    import cohort.progress
    for step in range(steps):
        train_step()
        cohort.progress.report(step)

The sidecar watches the file named by $COHORT_PROGRESS_FILE (the operator sets it): any write
counts as progress, and a whole number on its last line is the step. A workload that has
reported once is judged by its reports alone (docs/sidecar.md, "Progress and hangs"). The
same from C++: cohort::ReportProgress(step) (agent/progress.h); from a shell:
echo $STEP > $COHORT_PROGRESS_FILE.
"""
import os
import tempfile
import warnings

ENV = "COHORT_PROGRESS_FILE"

_warned = False


def report(step=None):
    """Writes `step` (an int) to $COHORT_PROGRESS_FILE, replacing what was there; without a
    step, a line that is no number: progress all the same, with no step to show.

    Returns True when written; False, doing nothing, when the variable is unset or empty.
    Never raises on I/O errors: a file that cannot be written is False, with one warning per
    process, since a training run must not die of a progress report.
    """
    path = os.environ.get(ENV)
    if not path:
        return False
    return report_to(path, step)


def report_to(path, step=None):
    """report(step), to the file `path`."""
    global _warned
    # "." is no step to the sidecar (ParseProgressStep), and still a write.
    content = f"{int(step)}\n" if step is not None else ".\n"
    try:
        _replace(path, content)
        return True
    except OSError:
        pass
    try:
        # A directory the workload may not create files in: the file rewritten in place.
        with open(path, "w") as f:
            f.write(content)
        return True
    except OSError as error:
        if not _warned:
            _warned = True
            warnings.warn(f"cannot report progress to {path}: {error} "
                          "(further failures are not reported)", RuntimeWarning, stacklevel=3)
        return False


def _replace(path, content):
    """A file beside `path`, renamed over it: the sidecar never reads half a report, and each
    report is a new file (a new inode), a change it cannot miss. Unique per call, for the
    several processes of one pod that may report to the same file."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=name + ".", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            # mkstemp makes it 0600; the sidecar may run as another user.
            os.fchmod(f.fileno(), 0o644)
            f.write(content)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
