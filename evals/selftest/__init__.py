"""The harness's own self-test: the canary (`canary`: the unguarded engine must FAIL, the guarded one PASS) and the
bug-class matrix of `selftest --mutants` (`mutants`: every planted bug class against every gate)."""
