"""A two-minute smoke of the fault soak (make soak: tests/soak/soak.py says what it does).

Real jaxlib, TensorFlow and agent-library clients through their pods' sidecars while both
coordinators are killed with SIGKILL every 4 to 12 seconds, the state volume fills for a few
seconds and empties, and the agent tasks' sidecar is killed once. Nothing acknowledged may be
lost or altered, and no client may see an error other than the full volume's refusal.
"""

import json
import signal
import subprocess
import sys

from harness import REPO_ROOT, tail

SOAK = REPO_ROOT / "tests" / "soak" / "soak.py"
DEADLINE_S = 900  # only so that nothing hangs: the soak itself runs two minutes


def test_a_two_minute_soak_loses_nothing(tmp_path):
    out = tmp_path / "soak.json"
    proc = subprocess.Popen(
        [sys.executable, str(SOAK), "--duration", "2m", "--kill-every", "4:12",
         "--fill-hold", "6s", "--log-dir", str(tmp_path / "logs"), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log, _ = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the soak stops its processes, then exits
        log, _ = proc.communicate(timeout=60)
        raise AssertionError(f"the soak ran past {DEADLINE_S} s:\n{tail(log, 80)}")
    assert out.exists(), tail(log, 80)
    res = json.loads(out.read_text())
    summary = {k: v for k, v in res.items() if k != "examples"}
    assert proc.returncode == 0, f"{tail(log, 80)}\n{summary}"
    assert res["lost"] == 0 and res["altered"] == 0 and res["client_errors"] == 0, res
    assert res["acknowledged"] > 0 and res["read_back"] == res["acknowledged"], summary
    assert res["coordinator_kills"] >= 10, summary
    assert res["volume_fills"] == 1 and res["writes_refused_full"] > 0, summary
    assert res["sidecar_kills"] == 1, summary
