"""One module per `orchestrate` command; each exposes register(subparsers)."""
