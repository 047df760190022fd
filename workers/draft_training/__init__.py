"""Training an Eagle3 head against its own target (`specdec-eval draft train`).

`collect` runs the target through the engine on GSM8K-style prompts and records, for every position, the three
captured layers and the target's own next-token choice; `vocab` picks the draft vocabulary; `ttt` is the
training-time-test objective; `trainer` drives it all with checkpoints so an interrupted run resumes.
"""
