"""Tune a small matmul on NullTarget through the CLI (a helper the fault tests run as
a separate process): python tests/tune_null.py DB TRIALS."""
import sys

import tunekit
from tunekit.cli import main as cli
from tunekit.testing import NULL_PLUGIN_NAME, null_plugin

if __name__ == "__main__":
    db, trials = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:   # a file to append every config this process measures to (one index a line)
        from tunekit.measure.measurer import Measurer
        measure = Measurer.measure

        def logged(self, ts, indices, *args, **kw):
            with open(sys.argv[3], "a") as f:
                f.write("".join(f"{i}\n" for i in indices))
            return measure(self, ts, indices, *args, **kw)
        Measurer.measure = logged
    tunekit.register_plugin(null_plugin, NULL_PLUGIN_NAME)
    recipe = f"{db}.toml"
    with open(recipe, "w") as f:
        f.write(f'target = "null"\n[[tasks]]\nop = "matmul"\nargs = {{M = 32, N = 32, K = 32}}\n'
                f'template = "null-matmul"\n[tuning]\ntrials = {trials}\nbatch_size = 4\n'
                f'[database]\npath = "{db}"\n')
    sys.exit(cli.main(["tune", recipe]))
