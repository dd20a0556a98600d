"""Pure-Python reimplementations of the identical-mode kernels, op by op (tests only).

Each op rounds to float32 exactly where the kernel does, so results compare bit for bit.
Never imported by the package.
"""
