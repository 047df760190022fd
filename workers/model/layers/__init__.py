"""Model building blocks: norms, rotary embedding, (tensor-)parallel linears, attention, MLP."""
