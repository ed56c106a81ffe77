"""tunekit: learning to optimize tensor programs."""
__version__ = "0.1.0"

from ._plugins import hookimpl  # noqa: E402,F401
from .component import Options  # noqa: E402,F401
from .explorers import Explorer  # noqa: E402,F401
from .models import Candidate, CostModel, feature_matrix  # noqa: E402,F401
from .ops import Op, Template  # noqa: E402,F401
from .targets import Artifact, DeviceInfo, RunSettings, Target  # noqa: E402,F401
from .task import Task  # noqa: E402,F401
from .dispatch import apply_history_best, build  # noqa: E402,F401
from .memory import empty  # noqa: E402,F401
from .recipe import Recipe, load_recipe  # noqa: E402,F401
from .tuner import tune  # noqa: E402,F401
