"""Check a wheel of the tree on a user's machine: install it into a fresh virtual
environment (no editable paths, no dev tools) and run `tunekit plugins` there; every
entry point of pyproject.toml must load as a plugin and none may be broken. A package
missing from the distribution fails here, not for a user."""
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

#: the plugins that contributed something (a component or template), as the installed tunekit sees them
LOADED = ("from tunekit import registry; r = registry(); "
          "print(*{e.plugin for t in r.components.values() for e in t.values()} | "
          "{e.plugin for e in r.template_entries})")
root = Path(__file__).resolve().parent.parent
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, str(root)], check=True)
    wheel = next(Path(tmp).glob("tunekit-*.whl"))
    # the package data a user needs: the pretrained cost models (`pretrained = true`)
    shipped = {f"tunekit_plugins/{p.relative_to(root / 'plugins').as_posix()}"
               for p in (root / "plugins").rglob("pretrained/*.json")}
    unshipped = sorted(shipped - set(zipfile.ZipFile(wheel).namelist()))
    venv = Path(tmp) / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", str(wheel)], check=True)
    out = subprocess.run([venv / "bin" / "tunekit", "plugins"], capture_output=True, text=True, cwd=tmp)
    loaded = subprocess.run([venv / "bin" / "python", "-c", LOADED], capture_output=True, text=True, cwd=tmp)
print(out.stdout[-4000:], out.stderr[-2000:], loaded.stderr[-2000:])
entry_points = tomllib.loads((root / "pyproject.toml").read_text())["project"]["entry-points"]["tunekit"]
missing = sorted(set(entry_points) - set(loaded.stdout.split()))
problems = ([f"tunekit plugins exited {out.returncode}"] * (out.returncode != 0)
            + [f"plugins that contribute nothing from the wheel: {missing}"] * bool(missing)
            + ["broken plugins (see above)"] * ("broken plugins" in out.stdout)
            + [f"files missing from the wheel: {unshipped}"] * bool(unshipped))
if problems:
    sys.exit("wheel check failed: " + "; ".join(problems))
print(f"wheel check: {wheel.name} installs in a fresh venv; all {len(entry_points)} plugins load; "
      f"{len(shipped)} pretrained model file(s) in it")
