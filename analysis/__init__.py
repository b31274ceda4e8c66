"""attnlab's analysis layer, grouped by job: attention/ (readers of attention and captured records, numpy),
probes/ (run the model and measure a prediction), machinery/ (how the computation behaves, and its checks),
faithfulness/ (the benchmark and its store), circuit/ (circuit discovery)."""
