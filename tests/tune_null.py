"""Tune a small matmul on NullTarget through the CLI (a helper the fault tests run as
a separate process): python tests/tune_null.py DB TRIALS [MEASURED [all]].
MEASURED: a file to append every config this process measures to ("template index" a line);
all: tune the task on every template that serves it (null-matmul and the CPU family's), sharing its trials."""
import sys

import tunekit
from tunekit.cli import main as cli
from tunekit.testing import NULL_PLUGIN_NAME, null_plugin

if __name__ == "__main__":
    db, trials = sys.argv[1], sys.argv[2]
    every = sys.argv[4:] == ["all"]
    if len(sys.argv) > 3:
        from tunekit.measure.measurer import Measurer
        measure = Measurer.measure

        def logged(self, ts, indices, *args, **kw):
            with open(sys.argv[3], "a") as f:
                f.write("".join(f"{ts.template.name} {i}\n" for i in indices))
            return measure(self, ts, indices, *args, **kw)
        Measurer.measure = logged
    tunekit.register_plugin(null_plugin, NULL_PLUGIN_NAME)
    recipe = f"{db}.toml"
    with open(recipe, "w") as f:
        f.write('target = "null"\n[[tasks]]\nop = "matmul"\nargs = {M = 32, N = 32, K = 32}\n'
                + ("" if every else 'template = "null-matmul"\n')
                + f'[tuning]\ntrials = {trials}\nbatch_size = 4\n[database]\npath = "{db}"\n')
    sys.exit(cli.main(["tune", recipe]))
