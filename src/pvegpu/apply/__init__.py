"""Changing a live host: the only package that names live paths or runs commands.

- host.py: the effects seam (`Host`) and the real host (`LiveHost`, root `/`);
- bundle.py: a rendered bundle read back (MANIFEST.json, files, the apply contract);
- handlers.py: the one table of what each action does (doing.py) and undoes (undoing.py);
- commands.py: the host commands a runbook runs, checked up front (`command-missing`);
- preflight.py: what is checked before the first change;
- execute.py: the steps, journaled and resumable; state.py: journal and backups;
- run.py: `apply_bundle` (preflight, steps, final verification); undo.py: `revert`;
- check.py and its helpers: `pvegpu check`, the host against the plan, read only.
"""
