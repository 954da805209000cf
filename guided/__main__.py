from guided.cli import main

raise SystemExit(main())
