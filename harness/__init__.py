"""Starting local servers and processes, for the tests and the benchmarks."""
