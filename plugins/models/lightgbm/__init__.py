"""The `lightgbm` cost model: gradient-boosted trees (LightGBM) on program or knob
features. The rank objective is a custom objective implementing Eq. 2 of the
paper (pairwise logistic loss; LightGBM's lambdarank weighs pairs by NDCG
changes, which is not it), or regression; bootstrap ensembles; transfer (Eq. 4)."""
from __future__ import annotations

import numpy as np
from pydantic import Field

import tunekit

from ..gbt_common import GBTModel, GBTOptions


class LightGBMModel(GBTModel):
    """LightGBM cost model (see `GBTOptions` for what each option does)."""

    name = "lightgbm"

    class Options(GBTOptions):
        min_data_in_leaf: int = Field(2, ge=1, description="Least trials in a leaf (LightGBM's default of 20 "
                                                           "would stop small fits from splitting).")
        max_bin: int = Field(255, ge=2, description="Feature histogram bins.")

    @classmethod
    def available(cls) -> str | None:
        try:
            import lightgbm  # noqa: F401
        except ImportError:
            return "lightgbm is not installed (pip install tunekit[lightgbm])"
        return None

    def _params(self, seed: int) -> dict:
        o = self.options
        p = {"learning_rate": o.learning_rate, "max_depth": o.max_depth, "num_leaves": 2 ** o.max_depth,
             "min_sum_hessian_in_leaf": o.min_child_weight, "min_data_in_leaf": o.min_data_in_leaf,
             "bagging_fraction": o.subsample, "bagging_freq": 1 if o.subsample < 1 else 0,
             "feature_fraction": o.colsample, "lambda_l2": o.reg_lambda, "max_bin": o.max_bin,
             "seed": seed, "deterministic": True, "force_col_wise": True, "verbosity": -1,
             "feature_pre_filter": False}
        if o.n_jobs:
            p["num_threads"] = o.n_jobs
        if o.objective == "regression":
            p.update(objective="regression", metric="l2")
        else:
            p.update(metric="None")
        return p

    def _train(self, x, y, groups, margin, heldout, rounds, rng):
        import lightgbm as lgb
        params = self._params(int(rng.integers(2**31)))
        dtrain = lgb.Dataset(x, y, init_score=margin, params={"max_bin": self.options.max_bin, "verbosity": -1},
                             free_raw_data=True)
        rank = self.options.objective == "rank"
        if rank:
            loss = self._rank_loss(y, groups, rng)
            # LightGBM passes the raw score, init score included
            params["objective"] = lambda pred, _: loss.grad_hess(np.asarray(pred, np.float64))
        if heldout is None:
            return lgb.train(params, dtrain, rounds), rounds
        hx, hy, hg, hm = heldout
        dheld = lgb.Dataset(hx, hy, init_score=hm, reference=dtrain)
        feval = None
        if rank:
            hloss = self._rank_loss(hy, hg, rng)
            feval = lambda pred, _: ("pairloss", hloss.loss(np.asarray(pred, np.float64)), False)
        booster = lgb.train(params, dtrain, rounds, valid_sets=[dheld], valid_names=["heldout"], feval=feval,
                            callbacks=[lgb.early_stopping(self.options.early_stopping_rounds, verbose=False)])
        return booster, booster.best_iteration or rounds

    def _margin(self, booster, rounds, x, margin):
        out = np.asarray(booster.predict(x, num_iteration=rounds, raw_score=True), np.float64)
        return out if margin is None else out + margin

    def _dumps(self, booster) -> bytes:
        return booster.model_to_string().encode()

    def _loads(self, blob: bytes):
        import lightgbm as lgb
        return lgb.Booster(model_str=blob.decode())


@tunekit.hookimpl
def tunekit_cost_models():
    return [LightGBMModel]
