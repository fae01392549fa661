"""A stand-in for get-pip.py, which ansible-test downloads to put pip into the venvs it
makes for the sanity tests, from a site this machine cannot reach (only the package
indexes are reachable). `make test-ansible` copies it into ansible-test's cache as
~/.ansible/test/cache/get_pip_<version>.py when no real one is there. It bootstraps pip
from the venv's own ensurepip, then has that pip install what ansible-test asked for
(`pip==<version>`) from the index pip is configured with. get-pip's `--no-setuptools`
and `--no-wheel` only say what not to add, and nothing is added here.
"""

import ensurepip
import os
import subprocess
import sys

# ensurepip turns pip's configuration off in os.environ while it runs (PIP_CONFIG_FILE
# =/dev/null): the install after it needs the machine's index and certificates back.
environment = dict(os.environ)
ensurepip.bootstrap(upgrade=False)
wanted = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
command = [sys.executable, "-m", "pip", "install", "--quiet", *wanted]
sys.exit(subprocess.call(command, env=environment))
