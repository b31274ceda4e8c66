"""The quadrature of integrated gradients: an adaptive composite Simpson rule on the path α ∈ [0, 1] whose panels
are checked one by one against the logit itself.

Each panel [a, b] holds the nodes a, (a + b) / 2 and b with weights (b − a) / 6 · (1, 4, 1) (exact for cubics;
the 3-point Gauss–Lobatto rule), its ends shared with its neighbours. A node's row gives the logit y(α) and the
terms of ∂y/∂α, so each panel checks itself with no extra run: its error E = Σ_k w_k y'(α_k) − (y(b) − y(a)) (the
fundamental theorem of calculus). The rule starts with FIRST_PANELS even panels and, while Σ_panels |E| >
TOLERANCE · |y(1) − y(0)|, bisects the panels of largest |E| (a jump of y inside a panel, where a head switches
keys within 1/800 of the path, shows as a large E there and is cut down to its width). A bisected panel's nodes
all stay nodes (its middle becomes an end), so every row run is a node of the final rule: rows = steps + 1.
Σ_panels |E| bounds the completeness error |Σ_i a_i − (y(1) − y(0))| = |Σ_panels E|.

Graded (a text's zero-embedding baseline): the first even panel [0, 1/P] is split at 1/P · GRADE^-k down to FLOOR
and the panel at α = 0 takes the midpoint rule (y'(0) is run for y(0) but never weighed). A zero stream under
RMSNorm with RoPE has no additive position to lift it: each norm multiplies by up to 1/√ε near α = 0, so y' was
7.1e6 at α = 0 and y moved by O(1) between α = 1e-9 and 1e-2 on a tiny random Llama (Gemma-3's stacked norms:
down to α < 1e-12); the even rule, bisecting one panel a round, reached only 1.2e-4 and missed completeness by
104× (Gemma-3: 2e14×). Where y(α) has no limit as α → 0 (SmolLM2: y(1e-30) = −3.3, y(0) = 0) no rule can be
complete, and the completeness error says so.

A round spends at most a third of the nodes left: spent whole, the rounds of SmolLM2's indirect-object text (a jump of
y by 22 within 2e-3 of α at 0.345, y between −4.9 and 21 on the path, a rise of −0.75) bisected hundreds of small
panels and ran out of nodes with the jump's panels 1e-3 wide: completeness error 18.7 % at 512 nodes; a third a
round and 16 rounds: 0.56 % at 506 (the coreference text: 0.95 % → 0.25 %).

On lecture-decoder's faithfulness examples this took 30 rows an example on average (at most 55): against the
rule run to 1/20 of the tolerance, each example's attributions within 0.8 % (mean L1) and the same top token in
99 of 100 (the other a near tie)."""

from __future__ import annotations

import numpy as np

FIRST_PANELS, MAX_STEPS, TOLERANCE = 4, 512, 0.01  # panels to start from; nodes at most; Σ|E| / |y(1) − y(0)|
PER_PANEL = 2  # new nodes per panel (3 nodes, one end shared)
MAX_REFINES = 16  # bisection rounds at most: the narrowest panel 1 / (FIRST_PANELS · 2¹⁶) of the path
MARGIN = 2  # a round bisects panels until the others' Σ|E| is within tolerance / MARGIN
SHARE = 3  # a round bisects at most 1 / SHARE of the panels the node cap leaves room for (so later rounds go deeper)
GRADE, FLOOR = 8.0, 1e-30  # graded rule: each panel toward α = 0 GRADE times narrower, down to FLOOR wide


def simpson(a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """The panel [a, b]'s nodes [3] and weights [3]."""
    return np.array([a, (a + b) / 2, b]), np.array([1.0, 4.0, 1.0]) * (b - a) / 6


class Rule:
    """One input's rule: panel bounds on [0, 1] and every node's logit y and terms [T] (per hook name) run so far."""

    def __init__(self, panels: int = FIRST_PANELS, graded: bool = False):
        self.bounds = np.linspace(0.0, 1.0, panels + 1)  # [P + 1]
        self.graded = graded
        if graded:  # [0, 1/P] split at 1/P · GRADE^-k down to FLOOR
            k = int(np.floor(np.log(self.bounds[1] / FLOOR) / np.log(GRADE)))
            self.bounds = np.sort(np.concatenate([self.bounds, self.bounds[1] * GRADE ** -np.arange(1.0, k + 1)]))
        self.y: dict[float, float] = {}
        self.terms: dict[float, dict[str, np.ndarray]] = {}
        self.rows = 0  # gradient rows run

    @property
    def steps(self) -> int:
        """The rule's nodes less α = 0: PER_PANEL per panel."""
        return PER_PANEL * (len(self.bounds) - 1)

    def _panels(self):
        return zip(self.bounds[:-1].tolist(), self.bounds[1:].tolist())

    def _rule(self, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
        """The panel's weighted nodes and weights: Simpson's [3], or (graded) the midpoint [1] on the panel at α = 0,
        which never reads y' at α = 0 (there a zero stream's gradient can overflow to inf or NaN)."""
        if self.graded and a == 0.0:
            return np.array([(a + b) / 2]), np.array([b - a])
        return simpson(a, b)

    def wanted(self) -> np.ndarray:
        """The α's of the rule's nodes not run yet, sorted."""
        nodes = set(self.bounds.tolist()) | {x for a, b in self._panels() for x in self._rule(a, b)[0].tolist()}
        return np.array(sorted(nodes - set(self.y)))

    def add(self, alphas: np.ndarray, y: np.ndarray, terms: dict[str, np.ndarray]) -> None:
        """The runs of `alphas` [R]: y [R] and per name terms [R, T]."""
        for r, a in enumerate(alphas.tolist()):
            self.y[a] = float(y[r])
            self.terms[a] = {n: t[r] for n, t in terms.items()}
        self.rows += len(alphas)

    def slope(self, a: float) -> float:
        """dy/dα at a run node: the sum of its terms."""
        return float(sum(t.sum() for t in self.terms[a].values()))

    def errors(self) -> np.ndarray:
        """Each panel's E = Σ_k w_k y'(α_k) − (y(b) − y(a)) [P]."""
        out = []
        for a, b in self._panels():
            nodes, w = self._rule(a, b)
            out.append(sum(wk * self.slope(x) for x, wk in zip(nodes.tolist(), w)) - (self.y[b] - self.y[a]))
        return np.array(out)

    def rise(self) -> float:
        """y(1) − y(0)."""
        return self.y[1.0] - self.y[0.0]

    def refine(self, tolerance: float = TOLERANCE, max_steps: int = MAX_STEPS) -> bool:
        """Bisect the panels of largest |E| until the others' Σ|E| is within tolerance · |y(1) − y(0)| / MARGIN
        (at most 1 / SHARE of the panels max_steps nodes leave room for); False, bisecting none, when Σ|E| is within tolerance · |y(1) − y(0)|
        already or no panel fits."""
        e = np.abs(self.errors())
        limit = tolerance * abs(self.rise())
        room = (max_steps - self.steps) // PER_PANEL
        if e.sum() <= limit or room <= 0:
            return False
        order = np.argsort(-e, kind="stable")
        rest = e.sum() - np.cumsum(e[order])  # [P]: Σ|E| of the panels left after bisecting the first k + 1
        rest[-1] = 0.0  # none left (not a rounding residue)
        k = int(np.argmax(rest <= limit / MARGIN)) + 1
        cut = order[:min(k, max(1, room // SHARE))]
        self.bounds = np.sort(np.concatenate([self.bounds, (self.bounds[cut] + self.bounds[cut + 1]) / 2]))
        return True

    def integral(self) -> dict[str, np.ndarray]:
        """Per name the rule's Σ_k w_k terms(α_k) [T]: ∫₀¹ (e − b) · ∂y/∂z dα summed over each token's dimensions."""
        out: dict[str, np.ndarray] = {}
        for a, b in self._panels():
            for x, wk in zip(*self._rule(a, b)):
                for n, t in self.terms[float(x)].items():
                    out[n] = out.get(n, 0.0) + wk * t
        return out
