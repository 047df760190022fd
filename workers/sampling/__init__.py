"""Choosing tokens from the target's logits, below the engine: the keyed sampler and token log-probabilities
(`keyed`), verification of drafts for plain and speculative steps alike (`verify`), and the rejection sampler the
real engines use at temperature > 0 (`rejection`). Proposers live in spec/; they never decide which token is kept."""
