"""The handshake between a side of a sequential `ab` and its watcher (evals/sequential/ab_channel.py)."""

from __future__ import annotations

import threading
import time

from specdec_eval.evals.sequential.ab_channel import SideWait, acknowledge, acknowledged
from specdec_eval.evals.sequential.ab_watch import SideProgress, watch
from specdec_eval.evals.sequential.discordant_pairs import PairedSequentialDesign
from specdec_eval.evals.sequential.early_stop import EarlyStop


def test_a_side_waits_for_its_batch_to_be_read_and_runs_on_after_it(tmp_path):
    stop = tmp_path / "side-A.stop"
    wait = SideWait(stop, timeout_s=30, poll_s=0.01)
    threading.Timer(0.3, acknowledge, args=(stop, 2)).start()
    started = time.monotonic()
    wait.until_read(2)
    assert 0.25 < time.monotonic() - started < 10 and not wait.watcher_gone
    assert acknowledged(stop) == 2


def test_a_stop_file_ends_the_wait(tmp_path):
    stop = tmp_path / "side-A.stop"
    threading.Timer(0.2, stop.write_text, args=("decided\n",)).start()
    SideWait(stop, timeout_s=30, poll_s=0.01).until_read(5)
    assert stop.exists()


def test_a_gone_watcher_costs_one_timeout_then_the_side_runs_on(tmp_path, capsys):
    wait = SideWait(tmp_path / "side-A.stop", timeout_s=0.2, poll_s=0.01)
    wait.until_read(1)
    assert wait.watcher_gone and "running on without waiting" in capsys.readouterr().err
    started = time.monotonic()
    wait.until_read(3)
    assert time.monotonic() - started < 0.1


def test_a_side_blocks_after_its_batch_until_the_watcher_read_it_and_the_decision_falls_there(tmp_path):
    """The race this handshake removes: a side reports its batch and would run on. With the watcher behind, the side
    stays at its first batch; the watcher's first read sees it, decides (A all right, B all wrong: B-WORSE at once
    with a design that needs few pairs) and the side then sees the stop before its next batch."""
    stops = {n: tmp_path / f"side-{n}.stop" for n in "AB"}
    controllers = {n: EarlyStop(lambda task, n_max: None, batch=8, exact=False, stop_file=str(stops[n])) for n in "AB"}
    for controller in controllers.values():
        controller._watcher.poll_s = 0.01
        controller.start("t", 40)
    finished = {}

    def side(name: str) -> None:
        c = controllers[name]
        for position in range(8):
            c.observe("t", position, 100.0 if name == "A" else 0.0, None, None, position)
        c.after_batch("t")
        finished[name] = c.record("t")

    threads = [threading.Thread(target=side, args=(n,)) for n in "AB"]
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert not finished  # both wait for the watcher
    sides = {n: SideProgress(stops[n]) for n in "AB"}
    record = watch(sides, PairedSequentialDesign(p1=0.01), lambda: True, poll_s=0.01)
    for t in threads:
        t.join(timeout=30)
    assert record["stopped_sides"] and record["verdict"] == "B-WORSE"
    assert all(finished[n]["gate"] == "ab" and finished[n]["n"] == 8 for n in "AB")
