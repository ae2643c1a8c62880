"""Data sets shipped with sklearn_bnn.

``load_exoplanet_spectra`` and ``load_wasp12b``: the HELA example set of WFC3 transmission spectra
of hot Jupiters and the observed spectrum of WASP-12b. Cite Márquez-Neila, Fisher, Sznitman &
Heng, "Supervised machine learning for analysing spectra of exoplanetary atmospheres", Nature
Astronomy 2, 719-724 (2018) wherever they are used (see ``load_exoplanet_spectra().DESCR``).
"""

from ._exoplanets import load_exoplanet_spectra, load_wasp12b

__all__ = ["load_exoplanet_spectra", "load_wasp12b"]
