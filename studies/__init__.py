"""Studies: seeded simulations that check what the gates and designs state (error rates, power, standard errors),
each a `python -m specdec_eval.studies.NAME` command that prints its table. The product never imports them; they
import the product.

clustered_scores       the clustered standard error and the gates' false-FAIL rates on several samples a document
sequential_table       what the sequential designs cost and save against a fixed-n test
sequential_clustered   the sequential designs' error rates on clustered samples
sequential_acceptance  the acceptance gate's stated power against runs simulated from real ones
lossless_sampled       the sampled lossless gate's null, smooth-test, power and sampler checks
verify_bank            real verify steps recorded once and replayed for lossless_sampled's power
rejection_sampler_fit  the rejection sampler's output distribution by a chi-square fit
"""
