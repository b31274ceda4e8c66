"""Probes that run the model on an input and measure what made its prediction: ablation, patching, the logit lens,
direct logit attribution, gradient attributions and relevance, QK attribution, head tables, sinks, generation,
routing, and attention over an image's patches."""
