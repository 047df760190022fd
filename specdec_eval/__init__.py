"""specdec-eval: accuracy regression tool for one-model Eagle3 speculative decoding."""

__version__ = "0.1.0"

import os as _os

# Library progress bars (lm-eval's per task and stage, datasets', torch.hub's) would bury ours: tqdm reads this
# when it is first imported, which torch does, so it is set here, before anything else of ours loads.
_os.environ.setdefault("TQDM_DISABLE", "1")
