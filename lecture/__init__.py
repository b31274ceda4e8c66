"""The lecture models' tooling room: training (train, train_command, train_vit, resume, batches, curve, vit_aux),
evaluation (evaluate, evaluate_vit) and every model card (cards/). It imports model/ and analysis/; neither imports
it. The corpus, tokenizer and task generators a loaded model needs stay in attnlab.model.lecture."""
