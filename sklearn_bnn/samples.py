"""PosteriorSamples: the draws of every chain, stacked."""

from __future__ import annotations

import numpy as np
import torch

from ._persistence_registry import register

__all__ = ["PosteriorSamples"]


@register
class PosteriorSamples:
    """Posterior draws of a flat parameter vector, kept on the CPU.

    Parameters
    ----------
    draws : tensor of shape (n_chains, n_draws, D)
    log_prob : tensor of shape (n_chains, n_draws)
        Log posterior density (up to a constant) of each draw.
    names, shapes : list
        Layout of the flat vector (parameter names and shapes of the network).
    stats : dict of tensors (n_chains, n_draws, ...), optional
        Sampler statistics of the transition that produced each draw (acceptance probability,
        divergence, energy error, tree depth).

    Examples
    --------
    >>> s = PosteriorSamples(torch.zeros(2, 5, 3), torch.zeros(2, 5), ["w"], [(3,)])
    >>> s.flat().shape, len(s)
    (torch.Size([10, 3]), 10)
    """

    def __init__(self, draws: torch.Tensor, log_prob: torch.Tensor, names, shapes, stats=None):
        self.draws = draws.detach().cpu()
        self.log_prob = log_prob.detach().cpu()
        self.stats = {k: v.detach().cpu() for k, v in (stats or {}).items()}
        self.names = list(names)
        self.shapes = [tuple(s) for s in shapes]
        self.info = {}  # per-run sampler figures (step sizes, acceptance, divergences)

    @property
    def n_chains(self) -> int:
        return self.draws.shape[0]

    @property
    def n_draws(self) -> int:
        """Draws per chain."""
        return self.draws.shape[1]

    @property
    def dim(self) -> int:
        return self.draws.shape[2]

    def __len__(self) -> int:
        return self.n_chains * self.n_draws

    def __repr__(self) -> str:
        return f"PosteriorSamples(n_chains={self.n_chains}, n_draws={self.n_draws}, dim={self.dim})"

    def flat(self) -> torch.Tensor:
        """All draws of all chains pooled: (n_chains * n_draws, D)."""
        return self.draws.reshape(-1, self.dim)

    def as_dict(self) -> dict[str, torch.Tensor]:
        """Named parameters with leading axes (n_chains, n_draws)."""
        out, start = {}, 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            size = 1
            for s in shape:
                size *= s
            out[name] = self.draws[..., start : start + size].reshape(
                self.n_chains, self.n_draws, *shape
            )
            start += size
        return out

    def summary(self) -> dict:
        """Convergence of each coordinate and of the log density: mean, sd, bulk and tail ESS,
        split R-hat, as a dict of arrays (one entry per coordinate of the flat vector, then
        ``"log_prob"``)."""
        from .diagnostics import ess_bulk, ess_tail, rhat

        draws = self.draws.double().numpy()
        columns = [draws[..., j] for j in range(self.dim)] + [self.log_prob.double().numpy()]
        return {
            "mean": np.array([c.mean() for c in columns]),
            "sd": np.array([c.std(ddof=1) if c.size > 1 else np.nan for c in columns]),
            "ess_bulk": np.array([ess_bulk(c) for c in columns]),
            "ess_tail": np.array([ess_tail(c) for c in columns]),
            "rhat": np.array([rhat(c) for c in columns]),
        }

    def to_inference_data(self, include_draws: bool = True):
        """The draws as an ArviZ ``InferenceData`` (needs ArviZ: ``pip install arviz``).

        Parameters
        ----------
        include_draws : bool, default=True
            Export every named parameter (n_chains, n_draws, *shape); with False, only the log
            density and the sampler statistics.
        """
        try:
            import arviz
        except ImportError as exc:
            raise ImportError(
                "to_inference_data needs ArviZ: pip install arviz (or, in a checkout of "
                'sklearn_bnn, pip install -e ".[arviz]").'
            ) from exc
        posterior = {"log_prob": self.log_prob.double().numpy()}
        if include_draws:
            posterior.update({k: v.numpy() for k, v in self.as_dict().items()})
        stats = {"lp": posterior["log_prob"]}
        # ArviZ's names: "diverging" for what the package calls "divergent"
        stats.update(
            {"diverging" if k == "divergent" else k: v.numpy() for k, v in self.stats.items()}
        )
        if "step_size" in self.info:
            stats["step_size"] = np.broadcast_to(
                np.asarray(self.info["step_size"])[:, None], posterior["log_prob"].shape
            ).copy()
        return arviz.from_dict(posterior=posterior, sample_stats=stats)

    def concatenate(self, other: PosteriorSamples) -> PosteriorSamples:
        """These draws followed by ``other``'s (same chains, continued)."""
        return PosteriorSamples(
            torch.cat([self.draws, other.draws], dim=1),
            torch.cat([self.log_prob, other.log_prob], dim=1),
            self.names,
            self.shapes,
            {
                k: torch.cat([v, other.stats[k]], 1)
                for k, v in self.stats.items()
                if k in other.stats
            },
        )

    def to_state(self) -> dict:
        return {
            "draws": self.draws,
            "log_prob": self.log_prob,
            "names": self.names,
            "shapes": [list(s) for s in self.shapes],
            "stats": self.stats,
        }

    @classmethod
    def _check_state(cls, state: dict) -> None:
        """Check a decoded :meth:`to_state` dict (types, and that every size agrees with
        ``draws``) before :meth:`from_state`; raises ValueError naming the field."""
        from ._state_checks import check_state, dict_of, is_int, is_tensor, list_of, n_elements

        def is_name(value, field):
            if type(value) is not str:
                raise ValueError(f"{field} must be a parameter name, got {type(value).__name__}.")

        check_state(
            state,
            {
                "draws": is_tensor(ndim=3, floating=True),
                "log_prob": is_tensor(ndim=2, floating=True),
                "names": list_of(is_name),
                "shapes": list_of(list_of(is_int(0))),
                "stats": dict_of(is_tensor()),
            },
        )
        draws = state["draws"]
        n_chains, n_draws, dim = draws.shape
        for name, value in [("log_prob", state["log_prob"]), *state["stats"].items()]:
            # a statistic may carry more axes after (chain, draw): one noise precision per output
            if tuple(value.shape[:2]) != (n_chains, n_draws):
                raise ValueError(
                    f"{name} has shape {tuple(value.shape)}, but the draws have "
                    f"{n_chains} chains of {n_draws} draws."
                )
        if len(state["names"]) != len(state["shapes"]) or not state["names"]:
            raise ValueError("names and shapes of the layout do not match.")
        if n_elements(state["shapes"]) != dim:
            raise ValueError(
                f"the layout {state['shapes'][:4]} has {n_elements(state['shapes'])} "
                f"weights, but each draw has {dim}."
            )

    @classmethod
    def from_state(cls, state: dict) -> PosteriorSamples:
        return cls(
            state["draws"], state["log_prob"], state["names"], state["shapes"], state.get("stats")
        )
