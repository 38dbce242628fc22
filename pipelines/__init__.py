"""crawlake's pipeline: stages, kernels, the lake layer and the engines that run them."""

import os

# Intel MKL's strict conditional numerical reproducibility (CNR) for torch's CPU matrix multiplies:
# a row's rounding then depends neither on the intra-op thread count nor on the other rows of its
# batch, so an embedding vector's bits are the same in a full run and an incremental one, on any
# executor (the index fingerprint hashes them). Without it, two threads on an AVX-512 Xeon changed
# rows by up to 1.5e-7. MKL reads this once, at its first call, so it is set on the package's
# import, before any torch work; a value the user sets wins. Other BLAS libraries ignore it.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
