"""The ``memhook`` command's larger subcommands, each a front end:

* :mod:`memhook.cli.trace` - ``memhook trace``: run a command with the hooks
  preloaded; the machinery that collects every process's events, accounts
  for them and writes them is :mod:`memhook.tracing`;
* :mod:`memhook.cli.run` - ``memhook run``: a command with the core
  preloaded and the hooks on, no trace; its launcher (exit statuses,
  signals) is :mod:`memhook.cli.launch`, which ``trace`` uses too;
* :mod:`memhook.cli.info` - ``memhook info``: what a bug report needs;
* :mod:`memhook.cli.demo` - ``memhook demo``: :mod:`.demo_workload` under trace;
* :mod:`memhook.cli.diff` - ``memhook diff A B``: two jsonl traces compared;
* :mod:`memhook.cli.merge` - ``memhook merge FILES...``: many traces (a job's
  ranks) as one view, clocks aligned;
* :mod:`memhook.cli.config` - ``memhook config``: compiler and linker flags
  for the C API (and memhook.pc's folder, for pkg-config).
"""
