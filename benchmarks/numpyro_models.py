"""The benchmark networks written in NumPyro (optional: needs the ``bench`` extra).

Same parametrisation as bnnzoo's ``BNN``: weights ``[out, in]``, N(0, 1) priors
on every weight and bias, ``h W^T + b``.
"""

from __future__ import annotations

import numpy as np

try:
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as ndist
    from numpyro.infer.util import initialize_model

    AVAILABLE = True
except ImportError:  # pragma: no cover - optional
    AVAILABLE = False

ACT = {"tanh": "tanh", "relu": "relu"}


def mlp_model(widths: list[int], activation: str, likelihood: str, noise: float | str = 0.1, prior: str = "gaussian",
              prior_scale: float = 1.0, noise_prior: tuple[float, float] = (1.0, 1.0)):
    """A NumPyro model ``model(x, y)`` of an MLP with layer ``widths`` (input first); ``prior``:
    ``gaussian`` (N(0, prior_scale^2)) or ``laplace`` (Laplace(0, prior_scale)) on every weight and
    bias; ``noise="learned"``: the Gaussian likelihood's variance ``noise_var ~
    InverseGamma(*noise_prior)``, as bnnzoo's."""
    act = {"tanh": jnp.tanh, "relu": jax.nn.relu}[activation]
    weight = {"gaussian": ndist.Normal, "laplace": ndist.Laplace}[prior](0.0, prior_scale)

    def forward(params, x):
        h = x
        for i in range(len(widths) - 1):
            h = h @ params[f"w{i}"].T + params[f"b{i}"]
            if i < len(widths) - 2:
                h = act(h)
        return h

    def model(x, y=None):
        params = {}
        for i in range(len(widths) - 1):
            params[f"w{i}"] = numpyro.sample(f"w{i}", weight.expand([widths[i + 1], widths[i]]).to_event(2))
            params[f"b{i}"] = numpyro.sample(f"b{i}", weight.expand([widths[i + 1]]).to_event(1))
        f = forward(params, x)
        scale = noise
        if likelihood == "gaussian" and noise == "learned":
            scale = jnp.sqrt(numpyro.sample("noise_var", ndist.InverseGamma(*noise_prior)))
        with numpyro.plate("data", x.shape[0]):
            if likelihood == "gaussian":
                numpyro.sample("obs", ndist.Normal(f[:, 0], scale), obs=y)
            elif likelihood == "bernoulli":
                numpyro.sample("obs", ndist.Bernoulli(logits=f[:, 0]), obs=y)
            else:
                numpyro.sample("obs", ndist.Categorical(logits=f), obs=y)

    return model, forward


def value_and_grad_fn(model, x, y, seed: int = 0):
    """A jitted ``(value, grad)`` of the model's potential at an initial point."""
    info = initialize_model(jax.random.PRNGKey(seed), model, model_args=(x, y))
    fn = jax.jit(jax.value_and_grad(info.potential_fn))
    params = info.param_info.z

    def call():
        value, grad = fn(params)
        jax.block_until_ready(grad)
        return value

    return call


def as_jax(a) -> "jnp.ndarray":
    return jnp.asarray(np.asarray(a))
