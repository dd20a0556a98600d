"""The machine: the compiled binding and its ABI, threads, portable math, files, the version."""
