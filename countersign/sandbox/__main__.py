"""``python -m countersign.sandbox``: serve the sandbox until interrupted (see ``server.main``)."""

from countersign.sandbox.server import main

raise SystemExit(main())
