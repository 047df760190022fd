"""The server engines the tool knows, one module each (`vllm`, `llamacpp`, `specdec`, `sglang`, `trtllm`), each
defining one `EngineProfile` named PROFILE. The registry finds them by listing this package: a new engine is one
module (and the fixtures its tests read), nothing else.

A run picks the profile by what the server says it is (`profile_of_server`: its model card's `owned_by`, else its
`Server` header's product) or by `--engine-profile`; the readers of logs, metrics and responses take every
profile's tables from here, in name order."""

from __future__ import annotations

import importlib
import pkgutil
from types import MappingProxyType

from ...errors import UserError
from .profile import SCORES_BY_ECHO, SCORES_BY_PROMPT_LOGPROBS, EngineProfile, PrometheusNames
from .signature import LogFormat, Signature

AUTO = "auto"  # pick the profile from the server's identity


def _found() -> dict[str, EngineProfile]:
    found: dict[str, EngineProfile] = {}
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        profile = getattr(importlib.import_module(f"{__name__}.{module}"), "PROFILE", None)
        if isinstance(profile, EngineProfile):
            if profile.name in found:
                raise ValueError(f"two engine profiles named {profile.name!r}")
            found[profile.name] = profile
    return dict(sorted(found.items()))


PROFILES: MappingProxyType[str, EngineProfile] = MappingProxyType(_found())
PROFILE_NAMES = (AUTO, *PROFILES)  # what `--engine-profile` takes


def check_profile(name: str) -> str:
    """`name` if it names a profile (or "auto"); else one line listing them."""
    if name != AUTO and name not in PROFILES:
        raise UserError(f"unknown engine profile {name!r} (known: {', '.join(PROFILE_NAMES)})")
    return name


def profile_of_server(owned_by: str | None, server_header: str | None, loose: bool = True) -> EngineProfile | None:
    """The profile a server's identity names: its /v1/models `owned_by`, else its `Server` header's product (lower
    case). `loose`: also an `owned_by` other servers may say too (`EngineProfile.loose_owners`)."""
    for said in (owned_by, (server_header or "").split("/")[0]):
        said = (said or "").strip().lower()
        for profile in PROFILES.values():
            if said and said in profile.owners:
                return profile
    said = (owned_by or "").strip().lower()
    if loose and said:
        return next((p for p in PROFILES.values() if said in p.loose_owners), None)
    return None


def pick_profile(named: str, owned_by: str | None, server_header: str | None) -> EngineProfile | None:
    """The profile a run uses: the one named (`--engine-profile`), else the one the server's identity names."""
    if check_profile(named) != AUTO:
        return PROFILES[named]
    return profile_of_server(owned_by, server_header)


__all__ = [
    "AUTO",
    "PROFILES",
    "PROFILE_NAMES",
    "SCORES_BY_ECHO",
    "SCORES_BY_PROMPT_LOGPROBS",
    "EngineProfile",
    "LogFormat",
    "PrometheusNames",
    "Signature",
    "check_profile",
    "pick_profile",
    "profile_of_server",
]
