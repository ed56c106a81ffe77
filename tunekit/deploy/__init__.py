"""The deployment layer: kernels built from the best records (for downstream compilers) and
compiled networks."""
