"""Statistics the gates, the designs and the results share: pure functions of numbers (tests, p-values, intervals,
group-sequential boundaries, exact sums). A leaf: imports only numpy, scipy and the standard library, so every
layer above may use it and it knows none of them.

hypothesis        the accuracy test against a reference (threshold, minimum detectable effect)
clustered         scores over several samples per document: clustered standard error, paired differences
mcnemar           the exact McNemar test of discordant pairs
group_sequential  alpha-spending boundaries and crossing probabilities of group-sequential designs
acceptance_ratio  the paired test of acceptance length between two runs (swap test, t on the ratio)
pit               randomized probability integral transforms and their uniformity tests
"""
