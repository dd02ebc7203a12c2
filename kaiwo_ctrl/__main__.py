from kaiwo_ctrl.cli import main

raise SystemExit(main())
