"""One module per `orchestrate` command, each exposing `register(subparsers)`: parse, call the library, print.
No command imports another; shared arguments live in orchestrator/arguments.py.
"""
