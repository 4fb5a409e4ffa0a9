"""Stage 7, workflow: a checkout (matrix, lock, state folder, plan) driven through the stages in order:
the pipeline the CLI, verify-repro, the bench and the tests all use, and what `clean` removes."""
