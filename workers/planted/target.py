"""The target model as the engine step drives it, with the model-side planted bugs built in:
  spec_alters_target    while a spec worker is attached, the hidden-state capture rounds the target's residual
                        stream in place to FP8's precision (e4m3: 3 stored mantissa bits, the draft's feature
                        format; the range is kept) at every captured layer, for every request of the batch
  aux_layers_off_by_one the draft's auxiliary features are read one layer late: the output of each capture layer
                        instead of its input. The target computes exactly what it did, so every output stays the
                        same; the drafter reads features it was not trained on and accepts less (a quiet regression
                        only acceptance sees)
  verify_width_numerics a request's logits depend on how many tokens it verifies: a small deterministic
                        perturbation (5 % of the logits' spread) of every request verifying more than 1 token
  rewind_keeps_rejected (its second half; the verifier records which draft's KV is kept) a request whose rejected
                        draft's KV was kept feeds that draft again at its position, so the KV there is the draft's
Only the step's forward goes through this wrapper; scoring passes use the model itself.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..faults import FaultInjector
from ..model.attn_metadata import AttentionMetadata
from ..model.causal_lm import CausalLM
from ..model.layers.paged_kv import PagedKV

# In units of each row's logit spread (standard deviation): flips the greedy token where the top two are closer than
# about this fraction of the spread (measured: a few tokens in a hundred on SmolLM2, one in five on `tiny`).
WIDTH_NOISE = 0.05

# rewind_keeps_rejected: request id -> (KV position, the rejected draft whose KV is kept there)
KeptDrafts = dict[int, tuple[int, int]]


class PlantedTarget:
    def __init__(
        self, model: CausalLM, faults: FaultInjector, spec_attached: bool, kept: KeptDrafts, clock: Callable[[], int]
    ) -> None:
        self.model = model
        self.config = model.config
        self.tp = model.tp
        self.faults = faults
        self.spec_attached = spec_attached
        self.kept = kept
        self.clock = clock  # the engine step now
        self._rows: list[tuple[int, int]] = []  # this step's requests: (logits rows it verifies, first KV position)

    def __call__(
        self,
        input_ids: torch.Tensor,
        meta: AttentionMetadata,
        kv: PagedKV,
        capture_layers: tuple[int, ...] = (),
        halfway: Callable[[], None] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        step = self.clock()
        starts = (meta.kv_lens - meta.seq_lens).tolist()
        widths = [1 if r < meta.num_contexts else n for r, n in enumerate(meta.seq_lens.tolist())]
        self._rows = list(zip(widths, starts, strict=True))
        self._feed_kept_drafts(input_ids, meta, starts)
        layers = self.capture_layers(capture_layers, self.config.num_hidden_layers, step)
        return self.model(input_ids, meta, kv, layers, halfway=halfway, on_capture=self._capture_hook(step))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.verify_logits(self.model.compute_logits(hidden), self.clock())

    def _asked(self, point: str) -> bool:
        return self.faults.wants(point)

    def _feed_kept_drafts(self, input_ids: torch.Tensor, meta: AttentionMetadata, starts: list[int]) -> None:
        """rewind_keeps_rejected: in place, so the draft pass reads the same tokens the target was fed."""
        if not self.kept:
            return
        kept_by_request = dict(self.kept)
        self.kept.clear()  # a request not in this step is recomputed, or finished
        row = 0
        for r, (request_id, n) in enumerate(zip(meta.request_ids, meta.seq_lens.tolist(), strict=True)):
            kept = kept_by_request.get(request_id)
            if kept is not None and r >= meta.num_contexts and kept[0] == starts[r]:
                input_ids[row] = kept[1]
            row += n

    def _capture_hook(self, step: int) -> Callable[[torch.Tensor], None] | None:
        """spec_alters_target: what the model calls on each captured layer's input (None: nothing)."""
        if not (self.spec_attached and self._asked("spec_alters_target")):
            return None

        def round_in_place(h: torch.Tensor) -> None:
            if self.faults.due("spec_alters_target", step):
                mantissa, exponent = torch.frexp(h.float())  # mantissa in [0.5, 1): keep 4 significant bits
                h.copy_(torch.ldexp(torch.round(mantissa * 16) / 16, exponent))

        return round_in_place

    def capture_layers(self, layers: tuple[int, ...], num_layers: int, step: int) -> tuple[int, ...]:
        """aux_layers_off_by_one: each layer one later (the last layer stays the last)."""
        if not (self.spec_attached and layers and self._asked("aux_layers_off_by_one")):
            return layers
        if not self.faults.due("aux_layers_off_by_one", step):
            return layers
        return tuple(min(i + 1, num_layers - 1) for i in layers)

    def verify_logits(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        """verify_width_numerics: the logits of requests verifying more than one token are perturbed."""
        if not self._asked("verify_width_numerics"):
            return logits
        wide: list[tuple[int, int]] = []  # (logits row, KV position) of every row of a request verifying > 1
        first = 0
        for width, start in self._rows:
            if width > 1:
                wide.extend((first + j, start + j) for j in range(width))
            first += width
        if not wide or not self.faults.due("verify_width_numerics", step):
            return logits
        logits = logits.clone()
        rows = [r for r, _ in wide]
        noise = torch.stack([_width_noise(logits.shape[-1], position) for _, position in wide]).to(logits.device)
        logits[rows] += WIDTH_NOISE * logits[rows].std(dim=-1, keepdim=True) * noise
        return logits


def _width_noise(vocab: int, position: int) -> torch.Tensor:
    """Deterministic, and different at every position (a fixed bias per token would never flip a repeated choice)."""
    return torch.randn(vocab, generator=torch.Generator().manual_seed(position))
