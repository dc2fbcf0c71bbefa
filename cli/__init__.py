"""The `txlog` command line (typer). Parsing, formatting and exit codes only.

`cli.main:app` is the application; each group of verbs lives in its own module
(`cli.topics`, `cli.demo`, ...) and is registered in `cli.main`. The work itself is
done by `storage` (and `txlog`), imported inside the commands so that `txlog --help`
and shell completion stay fast.
"""
