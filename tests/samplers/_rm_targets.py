"""Small targets with closed-form second and third derivatives for the RMHMC tests."""

import torch


class AnalyticGaussian:
    """N(mean, cov) with its (constant) Hessian; third derivatives are zero."""

    def __init__(self, mean, cov):
        self.mean = torch.as_tensor(mean, dtype=torch.float64)
        self.cov = torch.as_tensor(cov, dtype=torch.float64)
        self.precision = torch.linalg.inv(self.cov)
        self.dim = self.mean.shape[0]
        self.dtype, self.device = torch.float64, torch.device("cpu")

    def value_and_grad(self, theta):
        d = theta - self.mean
        g = -(d @ self.precision)
        return 0.5 * (g * d).sum(-1), g

    def log_prob_grad_hessian(self, theta):
        v, g = self.value_and_grad(theta)
        return v, g, (-self.precision).expand(theta.shape[0], self.dim, self.dim)

    def hessian_contraction(self, theta, A):
        return torch.zeros_like(theta)

    def scalar_log_prob(self, th):
        d = th - self.mean
        return -0.5 * d @ self.precision @ d


class LogisticRegression2D:
    """Bayesian logistic regression, weight and bias, prior N(0, I / tau) (seeds/003 §5.5.1)."""

    def __init__(self, n=40, tau=1.0, seed=0):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, generator=g, dtype=torch.float64)
        self.X = torch.stack([x, torch.ones(n, dtype=torch.float64)], 1)
        w = torch.tensor([2.0, 0.0], dtype=torch.float64)
        p = torch.sigmoid(self.X @ w)
        self.y = (torch.rand(n, generator=g, dtype=torch.float64) < p).double()
        self.tau, self.dim = tau, 2
        self.dtype, self.device = torch.float64, torch.device("cpu")

    def value_and_grad(self, theta):
        z = theta @ self.X.T  # (C, n)
        ll = (self.y * z - torch.nn.functional.softplus(z)).sum(-1)
        s = torch.sigmoid(z)
        return ll - 0.5 * self.tau * (theta**2).sum(-1), (self.y - s) @ self.X - self.tau * theta

    def log_prob_grad_hessian(self, theta):
        v, g = self.value_and_grad(theta)
        s = torch.sigmoid(theta @ self.X.T)
        w = s * (1 - s)
        h = -(w[..., None] * self.X).mT @ self.X - self.tau * torch.eye(2).double()  # -X^T W X
        return v, g, h

    def hessian_contraction(self, theta, A):
        s = torch.sigmoid(theta @ self.X.T)
        w3 = -s * (1 - s) * (1 - 2 * s)  # d/dz of -s(1-s)
        quad = ((self.X @ A) * self.X).sum(-1)  # x_n^T A_c x_n, (C, n)
        return (w3 * quad) @ self.X

    def scalar_log_prob(self, th):
        z = self.X @ th
        ll = (self.y * z - torch.nn.functional.softplus(z)).sum()
        return ll - 0.5 * self.tau * (th**2).sum()

    def grid_moments(self, n=401, half_width=4.0):
        """Posterior mean and covariance by quadrature on a grid around the mode."""
        mode = torch.zeros(1, 2, dtype=torch.float64)
        for _ in range(50):  # Newton
            _, g, h = self.log_prob_grad_hessian(mode)
            mode = mode - torch.linalg.solve(h[0], g[0])[None]
        _, _, h = self.log_prob_grad_hessian(mode)
        sd = torch.sqrt(torch.diag(torch.linalg.inv(-h[0])))
        axes = [
            mode[0, k] + torch.linspace(-1, 1, n).double() * half_width * 2 * sd[k]
            for k in range(2)
        ]
        grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 2)
        lp, _ = self.value_and_grad(grid)
        w = torch.exp(lp - lp.max())
        w = w / w.sum()
        mean = (w[:, None] * grid).sum(0)
        c = grid - mean
        cov = (w[:, None, None] * c[:, :, None] * c[:, None, :]).sum(0)
        return mean, cov


class Funnel:
    """Neal's funnel, theta = [v, x_1..x_n], v ~ N(0, 9), x_i | v ~ N(0, e^v), with its Hessian
    and Hessian-derivative contraction written out (seeds/003 §5.6)."""

    def __init__(self, n=10):
        self.n, self.dim = n, n + 1
        self.dtype, self.device = torch.float64, torch.device("cpu")

    def value_and_grad(self, theta):
        v, x = theta[:, 0], theta[:, 1:]
        e, sq = torch.exp(-v), (x * x).sum(-1)
        value = -(v**2) / 18 - 0.5 * self.n * v - 0.5 * e * sq
        dv = -v / 9 - 0.5 * self.n + 0.5 * e * sq
        return value, torch.cat([dv[:, None], -e[:, None] * x], 1)

    def log_prob_grad_hessian(self, theta):
        value, g = self.value_and_grad(theta)
        v, x = theta[:, 0], theta[:, 1:]
        e = torch.exp(-v)
        h = torch.zeros(theta.shape[0], self.dim, self.dim, dtype=theta.dtype)
        h[:, 0, 0] = -1 / 9 - 0.5 * e * (x * x).sum(-1)
        h[:, 0, 1:] = h[:, 1:, 0] = e[:, None] * x
        h[:, 1:, 1:] = -e[:, None, None] * torch.eye(self.n, dtype=theta.dtype)
        return value, g, h

    def hessian_contraction(self, theta, A):
        v, x = theta[:, 0], theta[:, 1:]
        e = torch.exp(-v)
        a_vv, a_vx = A[:, 0, 0], A[:, 0, 1:] + A[:, 1:, 0]
        tr_xx = torch.diagonal(A[:, 1:, 1:], dim1=-2, dim2=-1).sum(-1)
        dv = 0.5 * a_vv * e * (x * x).sum(-1) - e * (a_vx * x).sum(-1) + e * tr_xx
        dx = -(a_vv * e)[:, None] * x + e[:, None] * a_vx
        return torch.cat([dv[:, None], dx], 1)

    @staticmethod
    def scalar_log_prob(th):
        v, x = th[0], th[1:]
        return -(v**2) / 18 - 0.5 * (th.shape[0] - 1) * v - 0.5 * torch.exp(-v) * (x * x).sum()
