"""attnlab: attention visualization and interpretability. `import attnlab as al; al.load("lecture-decoder")`.

Installed, the rooms are subpackages: attnlab.model (PyTorch: the hooked transformer, loading), attnlab.analysis,
attnlab.app and attnlab.pages (the Streamlit app), attnlab.cli (the `attnlab` command), attnlab.bench,
attnlab.lecture (the lecture models' training, evaluation and model cards), and the data packages
attnlab.sample_texts and attnlab.docs. In a checkout they stand at the top of the repository beside this folder,
and this package reads them from there.
"""

from pathlib import Path as _Path

_here = _Path(__file__).resolve().parent
if not (_here / "model").is_dir() and (_here.parent / "model" / "__init__.py").is_file():
    __path__.append(str(_here.parent))  # a checkout: attnlab.model is ../model  # noqa: F821

from attnlab.data import version as _version  # noqa: E402
from attnlab.model import *  # noqa: E402,F403
from attnlab.model import __all__  # noqa: E402,F401

__version__ = _version()
