"""Readers of attention: numpy over attention matrices and captured records (scores, masks, pooling, rollout, flow,
head statistics, the query-key projection, long inputs' lazy records). Nothing here runs a model or imports torch."""
