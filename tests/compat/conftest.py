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


def pytest_report_header(config):
    lines = []
    for c in JAXLIB_CLIENTS:
        state = f"skipped: {c.skip_reason}" if c.skip_reason else c.python
        lines.append(f"compat client {c.name} ({c.protocol}): {state}")
    return lines
