"""The loop IR (part of the plugin contract; see `VERSION`)."""
from .nodes import *  # noqa: F403
from .nodes import VERSION  # noqa: F401
from .printer import expr_str, program_str, stmt_str  # noqa: F401
from .sizes import SizeError, SizeVar, size_var  # noqa: F401
from .visitor import Mutator, Visitor, children, free_vars, replace_buffers, substitute  # noqa: F401
