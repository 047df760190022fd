"""Events: per-rank JSON lines, merged in time order; the events that fail a run."""

from __future__ import annotations

import json

from specdec_eval.workers.events import EventLog, count_events, failing_events, merge_event_files


def test_per_rank_files_merge_in_time_order(tmp_path):
    logs = [EventLog(rank=r, path=tmp_path / f"events.rank{r}.jsonl") for r in range(2)]
    logs[0].emit("warmup_oom", phase="general", num_tokens=256, num_gen_tokens=0)
    logs[1].emit("forward_error", error="x", request_ids=[3])
    logs[0].emit("request_failed", request_id=3, reason="x")
    with open(tmp_path / "events.rank1.jsonl", "a") as f:
        f.write('{"ts": 1, "rank": 1, "ty')  # a rank killed mid-write
    merged = merge_event_files([tmp_path / "events.rank0.jsonl", tmp_path / "events.rank1.jsonl", tmp_path / "nope"])
    assert [e["type"] for e in merged] == ["warmup_oom", "forward_error", "request_failed"]
    assert all({"ts", "rank", "type"} <= set(e) for e in merged)
    assert [json.loads(line)["rank"] for line in (tmp_path / "events.rank1.jsonl").read_text().splitlines()[:1]] == [1]
    assert count_events(merged) == {"warmup_oom": 1, "forward_error": 1, "request_failed": 1}
    assert [e["type"] for e in failing_events(merged)] == ["request_failed"]
