"""cohort.progress.report: the workload's progress reports to its sidecar ($COHORT_PROGRESS_FILE),
read back as the sidecar reads them."""
import os
import warnings

import pytest

import cohort
from cohort import progress


def sidecar_step(content):
    """The step the sidecar reads (ParseProgressStep, sidecar/progress_tracker.cc): the last
    line that is a whole number; None when no line is."""
    for line in reversed(content.split("\n")):
        line = line.strip()
        if line:
            try:
                return int(line)
            except ValueError:
                continue
    return None


@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    path = tmp_path / "progress"
    monkeypatch.setenv(progress.ENV, str(path))
    monkeypatch.setattr(progress, "_warned", False)
    return path


def test_the_step_written_is_the_step_the_sidecar_reads(progress_file):
    assert cohort.progress.report(145) is True
    assert progress_file.read_text() == "145\n"
    assert sidecar_step(progress_file.read_text()) == 145


def test_a_report_without_a_step_is_a_write_that_names_no_step(progress_file):
    assert progress.report() is True
    assert progress_file.read_text() != ""
    assert sidecar_step(progress_file.read_text()) is None


def test_each_report_replaces_the_last_and_leaves_no_other_file(progress_file):
    progress.report(1)
    progress.report(2)
    assert progress_file.read_text() == "2\n"
    assert os.listdir(progress_file.parent) == ["progress"]


def test_each_report_is_a_new_file_for_the_sidecar_to_see(progress_file):
    # The sidecar takes a change of inode, size or modification time as a write.
    progress.report()
    first = os.stat(progress_file).st_ino
    progress.report()
    assert os.stat(progress_file).st_ino != first


def test_the_file_is_readable_by_the_sidecars_user(progress_file):
    progress.report(3)
    assert os.stat(progress_file).st_mode & 0o777 == 0o644


def test_when_no_file_can_be_made_beside_it_the_file_is_rewritten_in_place(progress_file,
                                                                          monkeypatch):
    # A name that leaves no room for the temporary file's suffix (names end at 255 bytes).
    path = progress_file.parent / ("p" * 250)
    monkeypatch.setenv(progress.ENV, str(path))
    assert progress.report(9) is True
    assert path.read_text() == "9\n"


def test_without_the_variable_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    assert progress.report(7) is False
    monkeypatch.setenv(progress.ENV, "")
    assert progress.report(7) is False


def test_a_file_that_cannot_be_written_is_false_and_one_warning(progress_file, monkeypatch):
    monkeypatch.setenv(progress.ENV, str(progress_file.parent / "no-such-dir" / "progress"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert progress.report(1) is False
        assert progress.report(2) is False
    assert len(caught) == 1
    assert "cannot report progress" in str(caught[0].message)
