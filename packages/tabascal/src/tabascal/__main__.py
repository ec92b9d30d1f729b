from tabascal.cli import main

raise SystemExit(main())
