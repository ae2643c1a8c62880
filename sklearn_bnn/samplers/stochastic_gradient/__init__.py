"""The stochastic-gradient family: SGLD, SGHMC and the Metropolis-adjusted AMAGOLD, GSGHMC and
HTE, their kernels, update rules, default step sizes and graphed minibatch steps."""
