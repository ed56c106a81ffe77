"""tunekit: learning to optimize tensor programs."""
__version__ = "0.1.0"

from ._plugins import hookimpl  # noqa: F401
from .component import Options  # noqa: F401
from .dispatch import apply_history_best, build  # noqa: F401
from .explorers import Explorer  # noqa: F401
from .memory import empty  # noqa: F401
from .models import Candidate, CostModel, feature_matrix  # noqa: F401
from .ops import Op, Template  # noqa: F401
from .recipe import Recipe, load_recipe  # noqa: F401
from .targets import Artifact, DeviceInfo, RunSettings, Target  # noqa: F401
from .task import Task  # noqa: F401
from .tuner import tune  # noqa: F401
