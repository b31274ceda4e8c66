"""How the computation itself behaves, measured: attention backends, the KV cache, flash tiling, permutation
equivariance, positions, one block step by step and its variants, windowed perplexity; the `attnlab check`
verdicts over them, and the `attnlab bench` report's schema and reader."""
