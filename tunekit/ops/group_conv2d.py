"""group_conv2d: conv2d whose C input and K_out output channels are split into `groups`
groups, each convolved on its own: data[N, C, H, W] (NCHW) * weight[K_out, C / groups,
R, S] = out[N, K_out, OH, OW], output channel k reading the input channels of group
k // (K_out / groups). groups = 1 is conv2d and groups = C = K_out is depthwise_conv2d
(their own ops, with their own templates). NCHW only; the fused epilogue, stages
("pad", "conv") and geometry are conv2d's.
"""
from __future__ import annotations

from pydantic import model_validator

from . import conv2d
from .conv2d import Conv2dArgs
from .op import Op, Size


class GroupConv2dArgs(Conv2dArgs):
    groups: Size

    @model_validator(mode="after")
    def _check_groups(self):
        if self.C % self.groups or self.K_out % self.groups:
            raise ValueError(f"groups={self.groups} must divide both C={self.C} and K_out={self.K_out}")
        if self.layout != "NCHW" or self.data_layout not in (None, "NCHW"):
            raise ValueError(f"group_conv2d takes NCHW data only (layout {self.layout!r}); leave layout out")
        return self


group_conv2d = Op("group_conv2d", GroupConv2dArgs, conv2d.compute, conv2d.reference, flops=conv2d.flops,
                  reduction_size=lambda C, R, S, groups, **_: C // groups * R * S)
