"""ALBERT (AlbertModel, AlbertForMaskedLM): factorised embeddings and one layer shared by every block
(model/families/bert_like.py)."""

from attnlab.model.families.bert_like import row

FAMILY = row("albert", "ALBERT and other AlbertModel/AlbertForMaskedLM checkpoints (one layer group)")
