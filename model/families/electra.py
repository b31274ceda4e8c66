"""ELECTRA (ElectraModel, ElectraForMaskedLM generators, ElectraForPreTraining discriminators without their head):
BERT's encoder over factorised embeddings (model/families/bert_like.py)."""

from attnlab.model.families.bert_like import row

FAMILY = row("electra", "ELECTRA discriminators and generators (ElectraModel, ElectraForPreTraining, "
                        "ElectraForMaskedLM checkpoints)")
