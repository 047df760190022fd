"""Sequential designs: group-sequential boundaries, the accuracy gate's sequential test, `run --early-stop`, the
paired sequential A/B test on the discordant pairs and on acceptance, the watcher of a sequential `ab`, and the A/B
of two commits as a library call. What they cost and their error rates are checked by the studies package. Imports
gates, the run's shared values, results (an A/B's sides and their comparison) and workers."""
