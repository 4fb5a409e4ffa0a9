"""The in-image suites' names, in the order the tables show them: here, apart from the suites'
runner, so that the command line can offer them without loading it."""

SUITE_NAMES = ("contents", "linkage", "config", "rocminfo", "gemm", "versions", "archs", "workload")
