"""Circuit discovery: edge attribution patching (EAP) and EAP-IG over heads (their q, k and v inputs apart),
MLPs, the embeddings and the logits, and the faithfulness of the circuit they find."""

from attnlab.analysis.circuit.find import Circuit, find_circuit
from attnlab.analysis.circuit.graph import Graph

__all__ = ["Circuit", "Graph", "find_circuit"]
