"""Check a spec-dec configuration's draft head before anything runs: the folder is there, its config.json reads
as an Eagle3 head that fits the target, and its tensors (names and shapes, read from the file's header, not
loaded) are exactly the head's. The engine loads the head only when it is built, which for a spec-dec run comes
after the whole non-speculative baseline run; this check lets the command fail first."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from ...errors import UserError
from ..config import SpecConfig
from ..loading.model_config import ModelConfig
from .eagle3_head import Eagle3DraftModel, Eagle3HeadConfig, head_tensor_name, resolve_draft_model


def check_draft_model(spec: SpecConfig, target: ModelConfig, model: str) -> None:
    """Raise UserError when the head `spec.draft_model` names (for target `model`) cannot be loaded onto it."""
    head = resolve_draft_model(spec.draft_model, model)
    if head == "random":
        Eagle3HeadConfig.for_target(target, spec.capture_layers).check_against(target)
        return
    folder = Path(head).expanduser()
    if not folder.is_dir():
        raise UserError(f"draft model folder not found: {head}")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"draft model folder {folder} has no config.json")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{cfg_path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{cfg_path}: cannot read ({e})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{cfg_path}: expected a JSON object (an Eagle3 head's config)")
    try:
        hc = Eagle3HeadConfig.from_json(cfg, target, spec.capture_layers)
    except UserError as e:
        raise UserError(f"{cfg_path}: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{cfg_path}: not an Eagle3 head config ({type(e).__name__}: {e})") from None
    hc.check_against(target)
    _check_tensors(folder, hc)


def _check_tensors(folder: Path, hc: Eagle3HeadConfig) -> None:
    shapes = _tensor_shapes(folder)
    # The head's parameter names and shapes from an unloaded skeleton (a heads' worth of CPU memory for a moment;
    # the meta device would avoid even that, but its first use imports seconds of torch internals).
    expected = {name: tuple(p.shape) for name, p in Eagle3DraftModel(hc).named_parameters()}
    seen = set()
    for raw, shape in shapes.items():
        name = head_tensor_name(raw)
        if name is None or name == "d2t":
            continue
        if name not in expected:
            raise UserError(f"draft checkpoint tensor {raw!r} in {folder} is not part of an Eagle3 head")
        if shape != expected[name]:
            raise UserError(f"draft tensor {raw} in {folder}: shape {shape} != {expected[name]} (from its config.json)")
        seen.add(name)
    missing = sorted(set(expected) - seen)
    if missing:
        raise UserError(f"draft checkpoint in {folder} lacks tensors: {', '.join(missing[:5])}")


def _tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from model.safetensors' header, or pytorch_model.bin memory-mapped (weights_only)."""
    st, binf = folder / "model.safetensors", folder / "pytorch_model.bin"
    if st.is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(st), framework="pt") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (no __iter__)
        except Exception as e:  # safetensors raises its own error type for a cut-off or corrupt header
            raise UserError(f"{st}: not a readable safetensors file ({str(e).splitlines()[0][:120]})") from None
    if binf.is_file():
        with warnings.catch_warnings():  # torch warns about pickle protocols before it refuses a file: one line
            warnings.simplefilter("ignore")
            try:
                state = torch.load(binf, map_location="cpu", weights_only=True, mmap=True)
            except Exception as e:  # an unsafe pickle, a corrupt file, or the legacy format mmap cannot map
                try:
                    state = torch.load(binf, map_location="cpu", weights_only=True)
                except Exception:
                    raise UserError(f"{binf}: cannot load with weights_only=True ({type(e).__name__})") from None
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise UserError(f"{binf}: expected a state dict of tensors")
        return {k: tuple(v.shape) for k, v in state.items()}
    raise UserError(f"draft model folder {folder} has no model.safetensors or pytorch_model.bin")
