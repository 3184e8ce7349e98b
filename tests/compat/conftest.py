import pytest

from harness import ProcessGroup, jaxlib_clients

SERVERS = ("cohort", "jaxlib")

# Collected once: which jaxlib installations this run drives.
JAXLIB_CLIENTS = jaxlib_clients()


def client_server_params():
    """(client, server) pairs; a client that is not installed is skipped with its reason."""
    params = []
    for client in JAXLIB_CLIENTS:
        for server in SERVERS:
            marks = [pytest.mark.skip(reason=f"{client.name}: {client.skip_reason}")] \
                if client.skip_reason else []
            params.append(pytest.param((client, server), id=f"{client.name}-on-{server}",
                                       marks=marks))
    return params


@pytest.fixture
def group(tmp_path):
    g = ProcessGroup(tmp_path / "procs")
    yield g
    g.close()


def pytest_addoption(parser):
    parser.addoption("--no-skips", action="store_true",
                     help="a skipped test fails the run (tests/compat/run.sh, make test): every "
                          "client this suite names can be installed here")


def pytest_sessionfinish(session, exitstatus):
    if not session.config.getoption("--no-skips"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        session.config.compat_skipped = len(skipped)
        if exitstatus == 0:
            session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = getattr(config, "compat_skipped", 0)
    if n:
        terminalreporter.write_line(
            f"compat: --no-skips: {n} tests skipped, which fails the run; every client must be "
            f"installed (tests/compat/run.sh installs them)", red=True)


def pytest_report_header(config):
    lines = []
    for c in JAXLIB_CLIENTS:
        state = f"skipped: {c.skip_reason}" if c.skip_reason else c.python
        lines.append(f"compat client {c.name} ({c.protocol}): {state}")
    return lines
