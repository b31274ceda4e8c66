"""RoBERTa (RobertaModel, RobertaForMaskedLM): BERT's encoder with positions counted from padding_idx + 1
(model/families/bert_like.py)."""

from attnlab.model.families.bert_like import row

FAMILY = row("roberta", "RoBERTa, DistilRoBERTa and other RobertaModel/RobertaForMaskedLM checkpoints")
