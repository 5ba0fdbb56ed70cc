"""``python -m bench`` runs the benchmark (:mod:`bench.run`), ``python -m bench soak …`` the soak."""

import sys

from bench import run, soak

if sys.argv[1:2] == ["soak"]:
    raise SystemExit(soak.main(sys.argv[2:]))
raise SystemExit(run.main())
