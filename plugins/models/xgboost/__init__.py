"""The `xgboost` cost model: gradient-boosted trees (XGBoost) on knob or program
features, with the rank objective of the paper (Eq. 2) or regression, bootstrap
ensembles and transfer from history (Eq. 4).

The rank objective is the shared exact Eq. 2 (every pair up to `max_pairs`), not
xgboost's `rank:pairwise`: that one samples a few pairs per trial and round and,
measured on NullTarget matmul spaces, ranked clearly worse after 32-128 trials
(Spearman 0.4-0.7 against 0.6-0.95) for about the same fit time."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

import tunekit

from ..gbt_common import GBTModel, GBTOptions


class XGBoostModel(GBTModel):
    """XGBoost cost model (see `GBTOptions` for what each option does)."""

    name = "xgboost"

    class Options(GBTOptions):
        tree_method: Literal["hist", "exact", "approx"] = Field("hist", description="XGBoost tree method.")

    @classmethod
    def available(cls) -> str | None:
        try:
            import xgboost  # noqa: F401
        except ImportError:
            return "xgboost is not installed (pip install tunekit[xgboost])"
        return None

    def _params(self) -> dict:
        o = self.options
        p = {"eta": o.learning_rate, "max_depth": o.max_depth, "min_child_weight": o.min_child_weight,
             "subsample": o.subsample, "colsample_bytree": o.colsample, "lambda": o.reg_lambda,
             "tree_method": o.tree_method, "seed": o.seed, "verbosity": 0}
        if o.n_jobs:
            p["nthread"] = o.n_jobs
        if o.objective == "rank":   # the gradient comes from `obj`; the margin starts at 0
            p.update(base_score=0.0, disable_default_eval_metric=1)
        else:
            p.update(objective="reg:squarederror", eval_metric="rmse")
        return p

    def _train(self, x, y, groups, margin, heldout, rounds, rng):
        import xgboost as xgb
        params = dict(self._params(), seed=int(rng.integers(2**31)))
        obj = metric = None
        if self.options.objective == "rank":
            loss = self._rank_loss(y, groups, rng)
            obj = lambda pred, _: loss.grad_hess(np.asarray(pred, np.float64))
        dtrain = xgb.DMatrix(x, y, base_margin=margin)
        if heldout is None:
            return xgb.train(params, dtrain, rounds, obj=obj), rounds
        hx, hy, hg, hm = heldout
        dheld = xgb.DMatrix(hx, hy, base_margin=hm)
        if obj is not None:   # early stopping on the held-out rank loss itself
            held_loss = self._rank_loss(hy, hg, rng)
            metric = lambda pred, _: ("pairloss", held_loss.loss(np.asarray(pred, np.float64)))
        booster = xgb.train(params, dtrain, rounds, obj=obj, evals=[(dheld, "heldout")], custom_metric=metric,
                            early_stopping_rounds=self.options.early_stopping_rounds, verbose_eval=False)
        return booster, booster.best_iteration + 1

    def _margin(self, booster, rounds, x, margin):
        out = booster.inplace_predict(x, iteration_range=(0, rounds), predict_type="margin", base_margin=margin)
        return np.asarray(out, np.float64)

    def _dumps(self, booster) -> bytes:
        return bytes(booster.save_raw("ubj"))

    def _loads(self, blob: bytes):
        import xgboost as xgb
        return xgb.Booster(model_file=bytearray(blob))


@tunekit.hookimpl
def tunekit_cost_models():
    return [XGBoostModel]
