"""XLM-RoBERTa (XLMRobertaModel, XLMRobertaForMaskedLM): RoBERTa's layout with a multilingual vocabulary
(model/families/bert_like.py)."""

from attnlab.model.families.bert_like import row

FAMILY = row("xlm-roberta", "XLM-RoBERTa and other XLMRobertaModel/XLMRobertaForMaskedLM checkpoints")
