from .simulate import main

raise SystemExit(main())
