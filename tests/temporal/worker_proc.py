"""A worker process for the Temporal fault tests, run through ``amends worker``'s own code.

usage: worker_proc.py --temporal HOST:PORT --db URL --catalog ledger:catalog [--task-queue Q]
(the ledger file comes from $AMENDS_TEST_LEDGER; fault points from the env, see ledger.py)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from amends.cli.worker import register

parser = argparse.ArgumentParser(prog="amends")
register(parser.add_subparsers(dest="command"))
args = parser.parse_args(["worker", *sys.argv[1:]])
raise SystemExit(args.handler(args))
