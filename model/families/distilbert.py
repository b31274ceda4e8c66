"""DistilBERT (DistilBertModel, DistilBertForMaskedLM): BERT's encoder without token types
(model/families/bert_like.py)."""

from attnlab.model.families.bert_like import row

FAMILY = row("distilbert", "DistilBERT and other DistilBertModel/DistilBertForMaskedLM checkpoints")
