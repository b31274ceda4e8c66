"""What both halves of the TransformerLens cross-check run (torch only: theirs.py imports it without attnlab)."""

import torch

IDS = torch.tensor([[5, 17, 33, 8, 91, 120, 4, 60, 77, 2], [9, 1, 44, 150, 7, 3, 12, 99, 201, 18]])
A, B = torch.tensor([7, 11]), torch.tensor([30, 2])


def calls(cache, P):
    """The calls both halves make, by name (theirs.py makes the same ones on TransformerLens's cache)."""
    return {"acc_mid": cache.accumulated_resid(incl_mid=True),
            "acc_ln": cache.accumulated_resid(apply_ln=True, pos_slice=-1),
            "acc_ln_l1": cache.accumulated_resid(1, apply_ln=True, mlp_input=True),
            "dec": cache.decompose_resid(apply_ln=True), "dec_mlp1": cache.decompose_resid(1, mlp_input=True, apply_ln=True),
            "heads": cache.stack_head_results(apply_ln=True, pos_slice=-1),
            "full": cache.get_full_resid_decomposition(apply_ln=True, expand_neurons=False, pos_slice=-1),
            "full_n": cache.get_full_resid_decomposition(1, mlp_input=True, apply_ln=True),
            "proj": cache.get_full_resid_decomposition(apply_ln=True, pos_slice=-1, project_output_onto=P),
            "proj_n": cache.stack_neuron_results(2, apply_ln=True, incl_remainder=True, project_output_onto=P[:, 0])}


WEIGHTS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_U", "W_E", "W_in", "W_out", "b_in", "b_out")
