"""Every engine profile against what its engine sends, recorded in tests/peers/fixtures/<profile>/ (engines that
cannot run here: SGLang, trtllm-serve). Each file present is checked; a new engine's fixtures need no new test.

models.json         a /v1/models answer: its owned_by names this profile
log.txt             log lines; log_expected.json: the events the profile's table makes of them, in order (each a
                    subset of the event's fields), and the log alone recognised as this engine's
metrics.txt|.json   a metrics page; metrics_expected.json: the acceptance counters read from it
kv.txt              a metrics page; kv_expected.json: [gauge, used fraction]
response.json       one completion; acceptance_expected.json: the acceptance it carries, in our layout (K = 3)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from specdec_eval.peers.profiles import PROFILES, profile_of_server
from specdec_eval.peers.server.kv_usage import parse_kv_usage
from specdec_eval.peers.server.log import LogMatcher, ServerLog
from specdec_eval.peers.server.metric_formats import parse_metrics_response
from specdec_eval.peers.server.response_acceptance import response_acceptance

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RECORDED = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def _read(name: str, file: str):
    path = FIXTURES / name / file
    if not path.exists():
        pytest.skip(f"no {file} recorded for {name}")
    return json.loads(path.read_text()) if file.endswith(".json") else path.read_text()


def test_every_recorded_engine_has_a_profile():
    assert RECORDED and set(RECORDED) <= set(PROFILES)


@pytest.mark.parametrize("name", RECORDED)
def test_its_model_card_names_the_profile(name):
    (card,) = _read(name, "models.json")["data"]
    assert profile_of_server(card["owned_by"], "uvicorn") is PROFILES[name]


@pytest.mark.parametrize("name", RECORDED)
def test_its_log_lines_become_the_expected_events(name, tmp_path):
    lines, expected = _read(name, "log.txt").splitlines(), _read(name, "log_expected.json")
    matcher = LogMatcher(PROFILES[name].log)
    events = [e for number, line in enumerate(lines, 1) if (e := matcher.feed(line, number)) is not None]
    assert len(events) == len(expected), events
    for event, want in zip(events, expected, strict=True):
        assert {k: event.get(k) for k in want} == want, event
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    with ServerLog(log, poll_s=0.02) as follower:  # nothing names the engine: its log's content must
        follower.catch_up()
        assert follower.log_format[0] == name, follower.log_format


@pytest.mark.parametrize("name", RECORDED)
def test_its_metrics_page_gives_the_expected_counters(name):
    path = next((f for f in ("metrics.txt", "metrics.json") if (FIXTURES / name / f).exists()), None)
    if path is None:
        pytest.skip(f"no metrics page recorded for {name}")
    counters = parse_metrics_response((FIXTURES / name / path).read_text(), "smollm2")
    assert counters is not None
    for key, want in _read(name, "metrics_expected.json").items():
        got = getattr(counters, key)
        got = {str(k): v for k, v in got.items()} if isinstance(got, dict) else got
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, key


@pytest.mark.parametrize("name", RECORDED)
def test_its_kv_gauge_is_read(name):
    gauge, used = _read(name, "kv_expected.json")
    assert parse_kv_usage(_read(name, "kv.txt"), "smollm2") == (gauge, pytest.approx(used))
    assert gauge in PROFILES[name].kv_gauges


@pytest.mark.parametrize("name", RECORDED)
def test_its_response_carries_the_expected_acceptance(name):
    found = response_acceptance(_read(name, "response.json"), 3)
    assert found is not None
    for key, want in _read(name, "acceptance_expected.json").items():
        assert found[key] == want, (key, found)
