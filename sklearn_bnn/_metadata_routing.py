"""Metadata routing shared by the meta-estimators that fit one wrapped ``estimator``."""

from __future__ import annotations

from sklearn.utils.metadata_routing import MetadataRouter, MethodMapping

__all__ = ["RoutesFitToEstimatorMixin"]


class RoutesFitToEstimatorMixin:
    """``get_metadata_routing`` for a meta-estimator whose ``fit`` fits ``self.estimator``.

    What the meta-estimator's ``fit`` is given goes to the wrapped estimator's ``fit`` as that
    estimator requests it (``set_fit_request``); with ``estimator=None`` nothing is routed.
    """

    def get_metadata_routing(self):
        """Metadata routing (scikit-learn's): what ``fit`` is given goes to the wrapped
        estimator's ``fit`` as that estimator requests it (``set_fit_request``).

        Returns
        -------
        MetadataRouter
        """
        router = MetadataRouter(owner=self)
        if self.estimator is not None:
            router.add(
                estimator=self.estimator,
                method_mapping=MethodMapping().add(caller="fit", callee="fit"),
            )
        return router
