"""A view of a Hugging Face model whose family has no converter: transformers runs it (eager attention,
`output_attentions`), and its attention weights become the same torch-free CapturedRun the pages read.

folder.py:  what a folder must be (safetensors only, no repository code) and the transformers class to run.
config.py:  ViewConfig, the few sizes the pages show (read from the transformers config).
record.py:  ViewRecord, an AttentionRecord that holds weights only (no scores, q or k), built from the outputs.
loaded.py:  ViewModel, the LoadedModel interface the pages use, and what it cannot do.
"""

from attnlab.model.view.loaded import ViewModel, load_view

MODE = "transformers view"  # how `attnlab models` and the app name this way of running a model

__all__ = ["MODE", "ViewModel", "load_view"]
