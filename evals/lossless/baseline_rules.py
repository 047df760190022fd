"""What may be a lossless baseline, beyond the checks of a recorded run; called by `baseline.baseline_problem` and
the endpoint backend's checks. A baseline must be a different engine process of the same model and evaluation:

- not the server under test itself: a server judged against itself always agrees;
- not a recorded run of another model or another kind of engine: our engine and a server differ in
  numerics and tokenisation, so every difference would be blamed on spec-dec;
- not the noise-floor control: the control is the gate's yardstick of the baseline's own noise, and as
  the baseline it makes that noise 0;
- an endpoint run says what it cannot do instead of failing later with another reason: pairing (one
  prefill shared by a spec request and its plain twin) is our engine's alone, and `--gpus` starts ranks of our
  engine, never a server's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...peers.client.config import EndpointURL
from ...workers.interface import EngineIdentity
from .control import MARKER as CONTROL_MARKER

LOCAL_KINDS = ("local", "torchrun")  # one engine, ours, on one process or a torchrun job


def endpoint_pair_problem(endpoint: str, baseline_endpoint: str) -> str | None:
    """Why --baseline-endpoint cannot be the baseline of --endpoint (both URLs as given), or None."""
    spec, base = EndpointURL.parse(endpoint), EndpointURL.parse(baseline_endpoint)
    if spec.same_server(base):
        return (
            f"--endpoint and --baseline-endpoint reach the same server ({spec.public}): a server judged against "
            "itself always agrees; give --baseline-endpoint a second server of the same model without "
            "speculation"
        )
    return None


def recorded_baseline_problem(name: str, manifest: Mapping[str, Any], identity: EngineIdentity) -> str | None:
    """Why the recorded run `name` (its manifest.json) cannot be the baseline of a run of `identity`, or None: the
    checks baseline.baseline_problem makes with it (its own compare models and dtypes only between two local runs)."""
    engine_config = (manifest.get("config") or {}).get("engine") or {}
    if CONTROL_MARKER in engine_config:
        return (
            f"{name} is a noise-floor control (the plain side at {engine_config[CONTROL_MARKER]}): the gate's "
            "measure of the baseline's own noise, not a baseline"
        )
    record = manifest.get("engine") or {}
    kind = record.get("kind")
    ours = "our engine" if identity.kind in LOCAL_KINDS else "a server"
    if kind is not None and (kind in LOCAL_KINDS) != (identity.kind in LOCAL_KINDS):
        theirs = "our engine" if kind in LOCAL_KINDS else "a server"
        return (
            f"{name} was decoded by {theirs} ({kind}), this run by {ours} ({identity.kind}): another engine's "
            "numerics and tokenisation would be blamed on spec-dec"
        )
    if record.get("model") is not None and model_declared(identity) and record["model"] != identity.model:
        return f"{name} is of model {record['model']!r}, this run of {identity.model!r}"
    return None


def model_declared(identity: EngineIdentity) -> bool:
    """Whether `identity` names its model before it runs: ours always; a server only when --served-model or --model
    was given (else the declared identity carries the server's URL in its place, and the served model is known once
    the server answers)."""
    return identity.kind != "endpoint" or identity.model != (identity.config or {}).get("endpoint")


def endpoint_baseline_mode_problem(baseline: str) -> str | None:
    """Why `--baseline MODE` cannot go with --endpoint, or None (MODE: paired, separate, or a run)."""
    if baseline == "paired":
        return (
            "--baseline paired decodes a plain twin beside each spec-dec request from one shared prefill, which "
            "only our engine can do; against a server give --baseline-endpoint URL (the same model without "
            "speculation) or --baseline RUN (a recorded plain run of that server)"
        )
    return None


def endpoint_job_problem(gpus: int, nnodes: int = 1) -> str | None:
    """Why torchrun options cannot go with --endpoint, or None: they start ranks of our engine, never a server's."""
    if gpus > 1 or nnodes > 1:
        return (
            f"--gpus {gpus}" + (f" --nnodes {nnodes}" if nnodes > 1 else "") + " starts torchrun ranks of our "
            "engine; an endpoint run drives a server, whose parallelism is the server's own setting: leave "
            "them out"
        )
    return None
